package import DequeModule

/// The broker's bookkeeping as a pure state machine: workers and their credit, leases, the queues and
/// the coordinators. It touches no socket and reads no clock; the ``Broker`` actor feeds it events
/// with the time and carries out the ``Action``s it returns. Tests drive it with a test clock.
///
/// Rules (DESIGN.md §5):
/// - **Credit.** A worker's credit is its capacity minus its leases; the broker never has more than
///   `capacity` tasks at a worker, and none at a draining one. A worker whose tasks are short is lent
///   half as many again (``ShortTaskPrefetch``), unless the rules say not to.
/// - **Least loaded first.** Among workers that scan the kind and have credit, the one with the fewest
///   leases wins; ties go to the least recently used.
/// - **Leases.** A dispatched task is leased to its worker. When the worker is lost (silent for
///   `heartbeat.expiry`, gone on send, or said DISCONNECT) its leases are requeued at the head of the
///   queue with `attempt + 1` and the coordinator is told, or failed to the coordinator when that would
///   exceed the task's max attempts. Results for any other attempt or worker are stale and dropped.
/// - **Coordinators.** A coordinator silent for ``coordinatorExpiry`` (3 heartbeats, at least 10 s:
///   coordinators do not announce their own interval) loses its queued tasks, and its running ones
///   are cancelled on their workers. If it speaks again it is told so (DISCONNECT "unknown peer"), so
///   that it sends its unfinished tasks again instead of waiting for them forever.
package struct BrokerState: ~Copyable {
    package let heartbeat: Heartbeat
    package let maxQueued: Int
    /// Most live tasks (queued or running) one coordinator may have here; a SUBMIT beyond it is
    /// REJECTED with the reason.
    package var maxPerCoordinator = Int.max
    /// Lend a worker whose tasks are short a few beyond its slots (``ShortTaskPrefetch``).
    package var prefetchesShortTasks = true
    package internal(set) var workers: [PeerID: WorkerEntry] = [:] {
        didSet { self.lastWorker = nil }
    }
    /// The worker found last (``worker(_:)``): a worker's BATCH of RESULTs asks for it once per
    /// result. Forgotten whenever ``workers`` changes.
    var lastWorker: WorkerEntry?
    /// The workers whose credit is above 0 (kept by ``refreshCredit(_:)`` wherever credit changes),
    /// each knowing its place here (``WorkerEntry/Load/creditIndex``): a result and a dispatch change it
    /// for every task, without hashing.
    var withCredit: [WorkerEntry] = []
    package internal(set) var tasks = TaskTable()
    package internal(set) var coordinators: [PeerID: CoordinatorEntry] = [:] {
        didSet { self.lastCoordinator = nil }
    }
    /// The coordinator found last (``seenCoordinator(_:now:)``, ``coordinator(_:)``): a BATCH of
    /// SUBMITs asks for it once per task. Forgotten whenever ``coordinators`` changes.
    var lastCoordinator: CoordinatorEntry?
    /// The queues by kind (read by BrokerState+Figures.swift; changed only here).
    package var queues: [String: TaskQueue] = [:]
    /// The queue asked for last (``queue(for:)``): a BATCH of SUBMITs asks for the same kind once
    /// per task, and comparing the kind costs less than hashing it. Forgotten when its queue leaves
    /// ``queues`` (``dispatch(_:_:into:)``, the one place a queue goes).
    var lastQueue: TaskQueue?
    var useCounter: UInt64 = 0
    var ticketCounter: UInt64 = 0
    package internal(set) var queuedCount = 0
    /// Coordinators dropped without their word recently (``rememberDropped(_:)``; at most
    /// `expiredMemory`, oldest dropped first).
    var expired: Set<PeerID> = []
    var expiredOrder = Deque<PeerID>()
    let expiredMemory = 10_000
    package internal(set) var figures = Figures()
    /// Each kind's figures, kept for the broker's lifetime (at most ``maxKindFigures`` kinds; the rest
    /// share the ``otherKinds`` entry).
    package var figuresByKind: [String: KindFigures] = [:]
    /// The kind whose figures a RESULT updated last (one kind at a time is the usual case).
    package var lastKindFigures: (kind: String, figures: KindFigures)?
    package static let maxKindFigures = 256
    package static let otherKinds = "(other)"
    /// The first instant the state was told of (``advance(to:)``), made at the first event. A class
    /// rather than an optional `Instant`: `Instant` is not frozen, so an optional one was tested and
    /// copied through the runtime's value witnesses (an optional class reference is a pointer).
    final class ClockInstants {
        let origin: ContinuousClock.Instant

        init(origin: ContinuousClock.Instant) { self.origin = origin }

        /// `now` in milliseconds since the origin, wrapping. A method, so that the state's reference
        /// is not retained for the subtraction (a call into the standard library), as a binding of
        /// it was (~40 instructions, twice a task).
        func milliseconds(at now: ContinuousClock.Instant) -> UInt32 {
            UInt32(truncatingIfNeeded: (now - self.origin).milliseconds)
        }
    }

    var clockInstants: ClockInstants?
    /// The bytes of the instant of the last ``advance(to:)``: every message of a BATCH carries the
    /// same one.
    var clockLast = InstantBytes.none
    /// Milliseconds since ``clockOrigin`` as of the latest event: tasks' queue times are kept in 4
    /// bytes on this clock.
    package var clock: UInt32 = 0
    /// Coordinators' jobs that ended, most recent last (at most ``endedJobsKept``).
    package var endedJobs = Deque<EndedJob>()
    package static let endedJobsKept = 20
    /// Every ended job's tasks, kept or not (``BrokerStatus/TaskTotals``).
    package var endedTotals = BrokerStatus.TaskTotals()

    package init(heartbeat: Heartbeat = Heartbeat(), maxQueued: Int = 10_000_000) {
        self.heartbeat = heartbeat
        self.maxQueued = maxQueued
    }

    /// How long a silent coordinator is kept.
    package var coordinatorExpiry: Duration { max(self.heartbeat.expiry, .seconds(10)) }

    /// The broker is stopping: queued tasks stay queued (no TASK goes out). It never resumes.
    package internal(set) var dispatchPaused = false

    /// A graceful stop began (``BrokerMachine/beginStop()``).
    package mutating func pauseDispatch() { self.dispatchPaused = true }

    /// Tasks leased to workers (running or on their way).
    package var leasedCount: Int { self.workers.values.reduce(0) { $0 + $1.leases.count } }

    /// Tasks waiting in the queues (not leased).
    package var queueDepth: Int { self.queuedCount }

    // MARK: Workers

    /// A worker said READY: register it (or refresh it) and dispatch to it.
    package mutating func workerReady(
        _ id: PeerID,
        capacity: Int,
        info: ReadyInfo,
        now: ContinuousClock.Instant
    ) -> [Action] {
        self.advance(to: now)
        let heartbeat = Heartbeat(
            interval: .milliseconds(info.heartbeatMilliseconds),
            liveness: self.heartbeat.liveness
        )
        let worker: WorkerEntry
        if let existing = self.workers[id] {
            // Re-registration on a new connection: it keeps its leases (their results are still coming).
            existing.name = info.name
            existing.capacity = capacity
            existing.load.reserve()
            existing.kinds = Set(info.kinds)
            existing.lastSeen = now
            existing.heartbeat = heartbeat
            existing.draining = false
            worker = existing
        } else {
            worker = WorkerEntry(
                id: id,
                name: info.name,
                capacity: capacity,
                kinds: Set(info.kinds),
                lastSeen: now,
                heartbeat: heartbeat
            )
            self.workers[id] = worker
            self.figures.registrations += 1
        }
        self.refreshCredit(worker)
        var actions: [Action] = []
        self.dispatch(into: &actions)
        return actions
    }

    /// Any message from a worker: it is alive. Returns false when the worker is unknown.
    package mutating func workerSeen(_ id: PeerID, now: ContinuousClock.Instant) -> Bool {
        guard self.workers[id] != nil else { return false }
        self.workers[id]!.lastSeen = now
        return true
    }

    /// A worker's own figures (with its heartbeat); false when the worker is unknown.
    package mutating func workerFigures(_ id: PeerID, _ figures: WorkerFigures, now: ContinuousClock.Instant) -> Bool {
        guard let worker = self.workers[id] else { return false }
        worker.lastSeen = now
        worker.figures = figures
        return true
    }

    /// A worker will take no new tasks; it keeps its leases until their results come back.
    package mutating func workerDraining(_ id: PeerID) -> [Action] {
        guard let worker = self.workers[id] else { return [] }
        worker.draining = true
        self.refreshCredit(worker)
        return []
    }

    /// A worker is gone (DISCONNECT, send failure, or expiry): requeue its leases.
    package mutating func workerLost(_ id: PeerID, reason: String) -> [Action] {
        var actions: [Action] = []
        self.removeWorker(id, reason: reason, into: &actions)
        self.dispatch(into: &actions)
        return actions
    }

    /// Removes a lost worker and requeues its leases, without dispatching them yet.
    mutating func removeWorker(_ id: PeerID, reason: String, into actions: inout [Action]) {
        guard let worker = self.workers.removeValue(forKey: id) else { return }
        self.unlistCredit(worker)
        self.figures.workersLost += 1
        for taskID in worker.leases.sorted() {
            self.requeueLease(
                taskID,
                of: id,
                status: .failed,
                reason: "worker \(worker.name) lost (\(reason))",
                into: &actions
            )
        }
    }

    /// A lease outlived its task's deadline plus grace without a RESULT (the worker is stuck or
    /// silent on it): the lease ends, and the task is queued again (or, on its last attempt, failed
    /// to its coordinator as timed out). A RESULT that comes later is stale.
    package mutating func expireLease(_ taskID: TaskID, worker: PeerID, attempt: UInt32) -> [Action] {
        guard let entry = self.tasks[taskID], entry.isLeased(to: worker), entry.attempt == attempt else { return [] }
        self.figures.leasesExpired += 1
        // The worker's slot stays busy until its scan ends; that credit comes back with the RESULT.
        if self.workers[worker]?.leases.remove(taskID) != nil { self.workers[worker]!.stuck[taskID] = attempt }
        var actions: [Action] = []
        self.requeueLease(
            taskID,
            of: worker,
            status: .timedOut,
            reason: "no result within the deadline on worker \(self.workers[worker]?.name ?? "?")",
            into: &actions
        )
        self.dispatch(into: &actions)
        return actions
    }

    /// Ends a lease: queue the task again at the head with `attempt + 1`, or fail it to its
    /// coordinator when that would exceed its max attempts.
    mutating func requeueLease(
        _ taskID: TaskID,
        of worker: PeerID,
        status: ResultStatus,
        reason: String,
        into actions: inout [Action]
    ) {
        guard var entry = self.tasks[taskID], entry.isLeased(to: worker) else { return }
        entry.worker = nil
        // Compared before adding: an attempt is at most maxAttempts (a UInt16), so the next cannot
        // overflow; the fuzzer found a SUBMIT with attempt UInt32.max trapping here before SUBMITs
        // were checked.
        if entry.attempt >= UInt32(entry.envelope.maxAttempts) {
            // No attempts left: the coordinator gets a failure and decides (its local retry, or final).
            self.remove(taskID)
            self.figures.ended(status)
            actions.append(
                .resultForCoordinator(
                    coordinator: entry.coordinator,
                    taskID,
                    attempt: entry.attempt,
                    status,
                    reason: "\(reason) on the last attempt"
                )
            )
            return
        }
        let next = entry.attempt + 1
        entry.attempt = next
        entry.queuedAt = self.clock
        entry.ticket = self.nextTicket()
        self.tasks[taskID] = entry
        guard let slot = self.tasks.slot(of: taskID) else { return }
        self.queue(for: entry.envelope.kind).prepend(
            .init(slot: slot, ticket: entry.ticket),
            priority: entry.envelope.priority,
            owner: entry.coordinator
        )
        self.queuedCount += 1
        self.figures.requeued += 1
        actions.append(.accepted(coordinator: entry.coordinator, taskID, attempt: next, requeued: true))
    }

    /// A RESULT from a worker. Its lease (if any) ends and its credit returns either way.
    package mutating func workerResult(
        _ worker: PeerID,
        taskID: TaskID,
        attempt: UInt32,
        status: ResultStatus,
        runMicroseconds: UInt32? = nil,
        now: ContinuousClock.Instant
    ) -> (ResultDisposition, [Action]) {
        var actions: [Action] = []
        let disposition = self.workerResult(
            worker,
            taskID: taskID,
            attempt: attempt,
            status: status,
            runMicroseconds: runMicroseconds,
            now: now,
            into: &actions
        )
        return (disposition, actions)
    }

    /// ``workerResult(_:taskID:attempt:status:runMicroseconds:now:)``, its actions appended to
    /// `actions` (the machine's reused buffer: no array per task).
    package mutating func workerResult(
        _ worker: PeerID,
        taskID: TaskID,
        attempt: UInt32,
        status: ResultStatus,
        runMicroseconds: UInt32?,
        now: ContinuousClock.Instant,
        into actions: inout [Action]
    ) -> ResultDisposition {
        guard let entry = self.worker(worker) else { return .unknownWorker }
        entry.lastSeen = now
        self.advance(to: now)
        // An abandoned run of this attempt (its coordinator was lost, and it came back with the same
        // task) may share the id and attempt with the live lease on this worker: the abandoned run
        // was cancelled, so a cancelled RESULT is its, and any other is the live run's (the same
        // task and input either way).
        if !entry.stuck.isEmpty, entry.stuck[taskID] == attempt,
            status == .cancelled || !entry.leases.contains(taskID)
        {
            // The late RESULT of an expired lease: stale, but its slot is free again.
            entry.stuck[taskID] = nil
            self.refreshCredit(entry)
            self.figures.staleResults += 1
            self.dispatch(into: &actions)
            return .stale
        }
        // The live attempt's RESULT ends its lease and goes to its coordinator.
        if let (coordinator, kind) = self.tasks.coordinatorAndKind(of: taskID, leasedTo: worker, attempt: attempt),
            entry.leases.remove(taskID) != nil
        {
            if let runMicroseconds, status != .cancelled {
                self.recordRunTime(microseconds: runMicroseconds, of: kind)
                if self.prefetchesShortTasks { entry.load.prefetch.ran(microseconds: runMicroseconds) }
            }
            self.refreshCredit(entry)
            self.remove(taskID)
            self.figures.forwarded(status)
            self.dispatch(into: &actions)
            return .forward(coordinator: coordinator)
        }
        self.figures.staleResults += 1
        // Anything else is stale. When the task is gone (cancelled, its coordinator lost) the lease ends
        // and the slot is free; when this worker holds a newer attempt of it (it ran the task before
        // it was lost and got it back), that live lease stays.
        guard self.tasks[taskID]?.isLeased(to: worker) != true, entry.leases.remove(taskID) != nil else {
            return .stale
        }
        self.refreshCredit(entry)
        self.dispatch(into: &actions)
        return .stale
    }

    // MARK: Time

    /// Expires silent workers and coordinators.
    package mutating func tick(now: ContinuousClock.Instant) -> [Action] {
        self.advance(to: now)
        var actions: [Action] = []
        let silentWorkers = self.workers.values.filter { now - $0.lastSeen > $0.heartbeat.expiry }.map(\.id)
        // Every silent worker goes before anything is dispatched: a requeued task must not go to a
        // worker that this same tick declares lost (it would burn an attempt there).
        for id in silentWorkers.sorted(by: { $0.bytes.lexicographicallyPrecedes($1.bytes) }) {
            actions.append(.disconnect(id, .unknownPeer, "missed \(self.heartbeat.liveness) heartbeats"))
            self.removeWorker(id, reason: "missed \(self.heartbeat.liveness) heartbeats", into: &actions)
        }
        let silentCoordinators = self.coordinators.filter { id, entry in
            if entry.detached { return false }
            if let grace = entry.awaitingReconnect { return now > grace }
            return now - entry.lastSeen > self.coordinatorExpiry
        }.map(\.key)
        for id in silentCoordinators.sorted(by: { $0.bytes.lexicographicallyPrecedes($1.bytes) }) {
            actions.append(.coordinatorExpired(id, tasks: self.tasks(of: id)))
            actions += self.coordinatorLost(id)
            self.rememberDropped(id)
        }
        // Then, once, what the lost workers held (the lost coordinators' tasks are gone by now).
        if !silentWorkers.isEmpty { self.dispatch(into: &actions) }
        return actions
    }

    /// Remembers a coordinator dropped without its word (silent past its expiry, or unreachable: a
    /// paused process's connection dies with libzmq's heartbeats): if it speaks again it is told,
    /// once, to send its unfinished tasks again (``takeExpiredNotice(_:)``), or it would wait for
    /// their results forever. The most recent ``expiredMemory`` are kept.
    package mutating func rememberDropped(_ id: PeerID) {
        self.expired.insert(id)
        self.expiredOrder.append(id)
        if self.expiredOrder.count > self.expiredMemory, let oldest = self.expiredOrder.popFirst() {
            self.expired.remove(oldest)
        }
    }

    // MARK: Tasks

    mutating func remove(_ id: TaskID) {
        guard let (coordinator, queuedKind) = self.tasks.remove(id) else { return }
        if let queuedKind {
            self.queuedCount -= 1
            self.queues[queuedKind]?.forget()
        }
        if let coordinator = self.coordinator(coordinator) { coordinator.taskCount -= 1 }
    }

    mutating func nextTicket() -> UInt64 {
        self.ticketCounter += 1
        return self.ticketCounter
    }
}
