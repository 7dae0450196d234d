package import DequeModule

/// The broker's bookkeeping as a pure state machine: workers and their credit, leases, the queues and
/// the coordinators. It touches no socket and reads no clock; the ``Broker`` actor feeds it events
/// with the time and carries out the ``Action``s it returns. Tests drive it with a test clock.
///
/// Rules (DESIGN.md §5):
/// - **Credit.** A worker's credit is its capacity minus its leases; the broker never has more than
///   `capacity` tasks at a worker, and none at a draining one.
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
    package private(set) var workers: [PeerID: WorkerEntry] = [:]
    /// The workers whose credit is above 0 (kept by ``refreshCredit(_:)`` wherever credit changes).
    private var withCredit: [PeerID: WorkerEntry] = [:]
    package private(set) var tasks = TaskTable()
    package private(set) var coordinators: [PeerID: CoordinatorEntry] = [:]
    /// The queues by kind (read by BrokerState+Figures.swift; changed only here).
    package var queues: [String: TaskQueue] = [:]
    private var useCounter: UInt64 = 0
    private var ticketCounter: UInt64 = 0
    package private(set) var queuedCount = 0
    /// Coordinators expired recently (at most `expiredMemory`, oldest dropped first).
    private var expired: Set<PeerID> = []
    private var expiredOrder = Deque<PeerID>()
    private let expiredMemory = 10_000
    package private(set) var figures = Figures()
    /// Each kind's figures, kept for the broker's lifetime (at most ``maxKindFigures`` kinds; the rest
    /// share the ``otherKinds`` entry).
    package var figuresByKind: [String: KindFigures] = [:]
    /// The kind whose figures a RESULT updated last (one kind at a time is the usual case).
    package var lastKindFigures: (kind: String, figures: KindFigures)?
    package static let maxKindFigures = 256
    package static let otherKinds = "(other)"
    /// The first instant the state was told of, and milliseconds since then as of the latest event
    /// (``advance(to:)``): tasks' queue times are kept in 4 bytes on this clock.
    package var clockOrigin: ContinuousClock.Instant?
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
    package private(set) var dispatchPaused = false

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
    private mutating func removeWorker(_ id: PeerID, reason: String, into actions: inout [Action]) {
        guard let worker = self.workers.removeValue(forKey: id) else { return }
        self.withCredit[id] = nil
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
        guard let entry = self.tasks[taskID], entry.worker == worker, entry.attempt == attempt else { return [] }
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
    private mutating func requeueLease(
        _ taskID: TaskID,
        of worker: PeerID,
        status: ResultStatus,
        reason: String,
        into actions: inout [Action]
    ) {
        guard var entry = self.tasks[taskID], entry.worker == worker else { return }
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
        self.queue(for: entry.envelope.kind).prepend(
            .init(id: taskID, ticket: entry.ticket),
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
        guard let entry = self.workers[worker] else { return (.unknownWorker, []) }
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
            var actions: [Action] = []
            self.dispatch(into: &actions)
            return (.stale, actions)
        }
        // The live attempt's RESULT ends its lease and goes to its coordinator.
        if let (coordinator, kind) = self.tasks.coordinatorAndKind(of: taskID, leasedTo: worker, attempt: attempt),
            entry.leases.remove(taskID) != nil
        {
            if let runMicroseconds, status != .cancelled {
                self.kindFigures(for: kind).runTime.record(microseconds: UInt64(runMicroseconds))
            }
            self.refreshCredit(entry)
            self.remove(taskID)
            self.figures.forwarded(status)
            var actions: [Action] = []
            self.dispatch(into: &actions)
            return (.forward(coordinator: coordinator), actions)
        }
        self.figures.staleResults += 1
        // Anything else is stale. When the task is gone (cancelled, its coordinator lost) the lease ends
        // and the slot is free; when this worker holds a newer attempt of it (it ran the task before
        // it was lost and got it back), that live lease stays.
        guard self.tasks[taskID]?.worker != worker, entry.leases.remove(taskID) != nil else { return (.stale, []) }
        self.refreshCredit(entry)
        var actions: [Action] = []
        self.dispatch(into: &actions)
        return (.stale, actions)
    }

    // MARK: Coordinators

    /// Any message from a coordinator: it is alive. Returns true when it was not known before.
    @discardableResult
    package mutating func coordinatorSeen(_ id: PeerID, now: ContinuousClock.Instant) -> Bool {
        guard let entry = self.coordinators[id] else {
            self.coordinators[id] = CoordinatorEntry(id: id, lastSeen: now)
            return true
        }
        entry.lastSeen = now
        if entry.awaitingReconnect != nil {
            entry.awaitingReconnect = nil
            return true
        }
        return false
    }

    /// ``coordinatorSeen(_:now:)`` for a SUBMIT, which needs the entry: one lookup for both.
    package mutating func seenCoordinator(_ id: PeerID, now: ContinuousClock.Instant) -> CoordinatorEntry {
        if let entry = self.coordinators[id] {
            entry.lastSeen = now
            entry.awaitingReconnect = nil
            return entry
        }
        let entry = CoordinatorEntry(id: id, lastSeen: now)
        self.coordinators[id] = entry
        return entry
    }

    /// The live tasks of a coordinator (or a detached job), in id order. It looks at every task, so it
    /// is for rare events (a coordinator lost, a job cancelled), not the hot path.
    package func tasks(of coordinator: PeerID) -> [TaskID] {
        guard let entry = self.coordinators[coordinator], entry.taskCount > 0 else { return [] }
        var ids: [TaskID] = []
        ids.reserveCapacity(entry.taskCount)
        self.tasks.forEach { if $0.coordinator == coordinator { ids.append($0.id) } }
        return ids.sorted()
    }

    /// Makes `id` the owner of a detached job's tasks: it never expires.
    package mutating func registerJob(_ id: PeerID, now: ContinuousClock.Instant) {
        let entry = self.coordinators[id] ?? CoordinatorEntry(id: id, lastSeen: now)
        self.coordinators[id] = entry
        entry.awaitingReconnect = nil
    }

    /// Drops a detached job that holds no tasks any more.
    package mutating func forgetJob(_ id: PeerID) {
        guard self.coordinators[id]?.taskCount == 0 else { return }
        self.coordinators[id] = nil
    }

    /// Queues a task recovered from the journal, for a coordinator that has until `graceUntil` to
    /// reconnect. Returns false when the id is already here.
    package mutating func recover(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: [UInt8],
        coordinator: PeerID,
        graceUntil: ContinuousClock.Instant
    ) -> Bool {
        guard self.tasks[id] == nil else { return false }
        if self.coordinators[coordinator] == nil {
            self.coordinators[coordinator] = CoordinatorEntry(
                id: coordinator,
                lastSeen: graceUntil,
                awaitingReconnect: graceUntil
            )
        }
        // The coordinator's id as the registry stores it: every task of a coordinator shares that one
        // buffer instead of keeping the copy its message arrived with (about 80 bytes a task).
        let owner = self.coordinators.index(forKey: coordinator).map { self.coordinators[$0].key } ?? coordinator
        let entry = TaskEntry(
            id: id,
            coordinator: owner,
            envelope: envelope,
            input: input,
            attempt: attempt,
            queuedAt: self.clock,
            worker: nil,
            ticket: self.nextTicket()
        )
        self.tasks[id] = entry
        if let registered = self.coordinators[owner] { registered.taskCount += 1 }
        self.queue(for: envelope.kind).append(
            .init(id: id, ticket: entry.ticket),
            priority: envelope.priority,
            owner: entry.coordinator
        )
        self.queuedCount += 1
        self.figures.recovered += 1
        return true
    }

    /// Tasks in flight: queued or leased.
    package var inFlight: Int { self.tasks.count }

    /// The live tasks (queued or leased) in queue order, as journal records for a snapshot.
    package func snapshot() -> [JournalRecord] {
        self.tasks.values.sorted { $0.ticket < $1.ticket }.map {
            .submit($0.id, coordinator: $0.coordinator, attempt: $0.attempt, $0.envelope, input: $0.input)
        }
    }

    /// Whether this coordinator was expired for silence and has not been told yet; telling it (the
    /// caller sends DISCONNECT "unknown peer") is then due, once.
    package mutating func takeExpiredNotice(_ id: PeerID) -> Bool {
        guard !self.expired.isEmpty, self.expired.remove(id) != nil else { return false }
        return true
    }

    /// A SUBMIT. Re-submitting a task the broker still holds for the same coordinator is accepted
    /// again without queueing it twice (a resend after a reconnect).
    package mutating func submit(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: [UInt8],
        from coordinator: PeerID,
        now: ContinuousClock.Instant
    ) -> [Action] {
        self.advance(to: now)
        let registered = self.seenCoordinator(coordinator, now: now)
        guard attempt >= 1, attempt <= UInt32(envelope.maxAttempts) else {
            self.figures.rejected += 1
            return [
                .rejected(
                    coordinator: coordinator,
                    id,
                    .invalid,
                    "attempt \(attempt) of a task with \(envelope.maxAttempts) attempts"
                )
            ]
        }
        if let existing = self.tasks[id] {
            guard existing.coordinator == coordinator else {
                self.figures.rejected += 1
                return [
                    .rejected(
                        coordinator: coordinator,
                        id,
                        .duplicateID,
                        "task id \(id) belongs to another coordinator"
                    )
                ]
            }
            return [.accepted(coordinator: coordinator, id, attempt: existing.attempt, requeued: false)]
        }
        guard self.queuedCount < self.maxQueued else {
            self.figures.rejected += 1
            return [.rejected(coordinator: coordinator, id, .queueFull, "queue full (\(self.maxQueued) tasks)")]
        }
        guard registered.taskCount < self.maxPerCoordinator else {
            self.figures.rejected += 1
            return [
                .rejected(
                    coordinator: coordinator,
                    id,
                    .queueFull,
                    "this coordinator has \(registered.taskCount) tasks at the broker, its limit (--max-queued-per-coordinator)"
                )
            ]
        }
        // The coordinator's id as the registry stores it: every task of a coordinator shares that one
        // buffer instead of keeping the copy its message arrived with (about 80 bytes a task).
        let entry = TaskEntry(
            id: id,
            coordinator: registered.id,
            envelope: envelope,
            input: input,
            attempt: attempt,
            queuedAt: self.clock,
            worker: nil,
            ticket: self.nextTicket()
        )
        self.tasks[id] = entry
        registered.taskCount += 1
        self.queue(for: envelope.kind).append(
            .init(id: id, ticket: entry.ticket),
            priority: envelope.priority,
            owner: entry.coordinator
        )
        self.queuedCount += 1
        self.figures.submitted += 1
        // Dispatch first: the TASK leaves before the ACCEPTED, which saves the worker a few
        // microseconds on every short task (the ACCEPTED still reaches the coordinator long before the
        // RESULT, which has to come back from the worker).
        var actions: [Action] = []
        self.dispatch(into: &actions)
        actions.append(.accepted(coordinator: coordinator, id, attempt: attempt, requeued: false))
        return actions
    }

    /// Connected coordinators (detached jobs, which own tasks but never connect, not counted).
    package var connectedCoordinators: Int { self.coordinators.values.reduce(0) { $0 + ($1.detached ? 0 : 1) } }

    /// A CANCEL from a coordinator for one of its tasks.
    package mutating func cancel(_ id: TaskID, from coordinator: PeerID) -> [Action] {
        guard let entry = self.tasks[id], entry.coordinator == coordinator else { return [] }
        if let worker = entry.worker {
            // The worker answers with RESULT(cancelled), which is forwarded as the attempt's result.
            return [.cancelOnWorker(worker: worker, id)]
        }
        self.remove(id)
        self.figures.ended(.cancelled)
        return [
            .resultForCoordinator(coordinator: coordinator, id, attempt: entry.attempt, .cancelled, reason: "cancelled")
        ]
    }

    /// A coordinator is gone: drop its queued tasks and cancel its running ones.
    package mutating func coordinatorLost(_ id: PeerID) -> [Action] {
        guard let lost = self.coordinators[id] else { return [] }
        if let job = lost.job {
            self.jobEnded(EndedJob(coordinator: lost.id, figures: job, ended: lost.lastSeen, left: true))
        }
        let ids = self.tasks(of: id)
        self.coordinators[id] = nil
        self.figures.coordinatorsLost += 1
        var actions: [Action] = []
        for taskID in ids {
            guard let entry = self.tasks[taskID] else { continue }
            if let worker = entry.worker {
                actions.append(.cancelOnWorker(worker: worker, taskID))
                // The scan goes on until the worker answers the CANCEL: its slot stays taken, as an
                // abandoned lease, so that the same task submitted again is not confused with it.
                if let holder = self.workers[worker], holder.leases.remove(taskID) != nil {
                    holder.stuck[taskID] = entry.attempt
                }
            }
            self.remove(taskID)
            self.figures.ended(.cancelled)
        }
        return actions
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
            self.expired.insert(id)
            self.expiredOrder.append(id)
            if self.expiredOrder.count > self.expiredMemory, let oldest = self.expiredOrder.popFirst() {
                self.expired.remove(oldest)
            }
        }
        // Then, once, what the lost workers held (the lost coordinators' tasks are gone by now).
        if !silentWorkers.isEmpty { self.dispatch(into: &actions) }
        return actions
    }

    // MARK: Dispatch

    private mutating func dispatch(into actions: inout [Action]) {
        guard self.queuedCount > 0, !self.dispatchPaused else { return }
        if self.queues.count == 1, let kind = self.queues.keys.first {
            // The usual case, without copying the keys.
            self.dispatch(kind, into: &actions)
            return
        }
        for kind in Array(self.queues.keys) { self.dispatch(kind, into: &actions) }
    }

    private mutating func dispatch(_ kind: String, into actions: inout [Action]) {
        guard let queue = self.queues[kind] else { return }
        while !queue.isEmpty {
            guard let workerID = self.bestWorker(for: kind) else { break }
            let item = queue.popFirst { item in self.tasks.isQueued(item.id, ticket: item.ticket) }
            guard let item else { break }
            self.queuedCount -= 1
            if let queuedAt = self.tasks.lease(item.id, to: workerID.id) {
                queue.figures.queueWait.record(
                    microseconds: UInt64(Self.elapsed(from: queuedAt, to: self.clock)) * 1000
                )
            }
            self.useCounter += 1
            workerID.leases.insert(item.id)
            workerID.lastUsed = self.useCounter
            self.refreshCredit(workerID)
            self.figures.dispatched += 1
            actions.append(.dispatch(worker: workerID.id, item.id))
        }
        // The one queue stays when it empties (and keeps its storage); with several kinds, empty
        // ones go.
        if queue.isEmpty, self.queues.count > 1 { self.queues[kind] = nil }
    }

    /// The queue for `kind`, made when there is none.
    private mutating func queue(for kind: String) -> TaskQueue {
        if let queue = self.queues[kind] { return queue }
        let queue = TaskQueue(figures: self.kindFigures(for: kind))
        self.queues[kind] = queue
        return queue
    }

    /// Keeps ``withCredit`` true for a registered worker after its credit may have changed.
    private mutating func refreshCredit(_ worker: WorkerEntry) {
        self.withCredit[worker.id] = worker.credit > 0 ? worker : nil
    }

    /// The worker with credit that scans `kind`, fewest leases first, then least recently used. It
    /// looks only at the workers with credit (with a hundred busy workers, a result frees one).
    private func bestWorker(for kind: String) -> WorkerEntry? {
        var best: WorkerEntry?
        var bestKey = (leases: Int.max, lastUsed: UInt64.max)
        for worker in self.withCredit.values {
            guard worker.credit > 0 else { continue }
            let key = (leases: worker.leases.count, lastUsed: worker.lastUsed)
            guard key < bestKey, worker.kinds.contains(kind) else { continue }
            best = worker
            bestKey = key
        }
        return best
    }

    private mutating func remove(_ id: TaskID) {
        guard let entry = self.tasks.removeValue(forKey: id) else { return }
        if entry.worker == nil {
            self.queuedCount -= 1
            self.queues[entry.envelope.kind]?.forget()
        }
        if let coordinator = self.coordinators[entry.coordinator] { coordinator.taskCount -= 1 }
    }

    private mutating func nextTicket() -> UInt64 {
        self.ticketCounter += 1
        return self.ticketCounter
    }
}
