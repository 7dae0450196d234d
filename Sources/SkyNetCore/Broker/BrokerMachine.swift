package import Logging

/// Every rule of the broker, in one pure machine: it takes one event at a time (a peer's message, a
/// tick, a journal commit, a stop request, a peer found unreachable) with the time, and leaves the
/// ``Effect``s to carry out in ``effects``. It touches no socket, file or clock. The ``Broker`` actor
/// does the I/O only: it reads frames and calls this, then sends, appends to the journal and arms
/// timers as the effects say. The fuzzer (`skynet-fuzz`) and the unit tests drive this same entry
/// point, so what is fuzzed is what runs.
///
/// It owns the broker's pure parts and the policy between them:
/// - ``BrokerState``: workers, credit, leases, the queues, coordinators and their expiry;
/// - ``LeaseDeadlines``: tasks with a timeout;
/// - in durable mode ``CommitPipeline`` (nothing is promised before the journal holds it) and
///   ``DetachedJobs``;
/// - the limits (workers, coordinators), the stop gate (``Phase``), the ACCEPTED hold, the bulk
///   hold, where a detached job's results go, and bad input's counts.
///
/// Not copyable: one owner (the actor, a test or the fuzzer) holds it, and its parts are never
/// copied by accident. The actor hands its effects on with ``takeEffects(into:)``, so that carrying
/// one out (a send that finds a peer gone) may report back to the machine.
package struct BrokerMachine: ~Copyable {
    /// What the broker does with its peers' work.
    package enum Phase: Equatable {
        /// Accepting, dispatching.
        case serving
        /// A graceful stop: no SUBMIT is accepted and nothing is dispatched; running tasks finish.
        case stopping
    }

    /// What the actor carries out, in order.
    package enum Effect: Equatable {
        /// Send TASK for this task, as the task table holds it, to the worker.
        case task(worker: PeerID, TaskID, hint: SlotHint = .none)
        case toWorker(PeerID, WireMessage)
        case toCoordinator(PeerID, WireMessage)
        /// Encoded frames for a coordinator. With `keep`, a RESULT that is kept (``undeliverable(_:frames:result:now:)``)
        /// when its coordinator cannot be reached now: it is sent at once rather than gathered.
        case frames(PeerID, [[UInt8]], keep: TaskID?)
        /// Answer a STATUS with a snapshot (``Broker/status()``).
        case statusReply(PeerID)
        /// Append a record to the journal (durable mode). The journal numbers records from 1 in
        /// the order they come; the machine counts the same way (``CommitPipeline``).
        case journal(JournalRecord)
        /// Send these first ACCEPTEDs of one coordinator, in order (held, ``acceptedHoldExpired()``,
        /// and their tasks still here for it): one ACCEPTED list when `list` (2 to
        /// ``ProtocolLimits/acceptedListMost``, to a coordinator that reads lists), else one message
        /// each. One effect for a run: each written straight into the coordinator's BATCH, not one
        /// effect and one message value per task.
        case accepted([HeldAccepted], list: Bool)
        /// Forget what is gathered or parked for a peer that is gone.
        case dropOutbox(PeerID, front: Bool)
    }

    /// A first ACCEPTED not sent yet (``holdAccepted(_:_:attempt:)``).
    package struct HeldAccepted: Equatable {
        package let coordinator: PeerID
        package let id: TaskID
        package let attempt: UInt32
        /// Where the task was when its ACCEPTED was held.
        package var hint = SlotHint.none
    }

    /// The most held ACCEPTEDs the next hold has room for in advance (``acceptedHoldExpired()``).
    static let keptHeldAccepted = 1 << 14

    /// How long a first ACCEPTED may wait (``holdAccepted(_:_:attempt:)``).
    package static let acceptedHold = Duration.milliseconds(2)
    /// A coordinator with this many tasks here gets its messages in bulk (``holdForBulk(_:now:)``).
    package static let bulkTasks = 64
    package static let bulkGathering = Duration.milliseconds(1)

    package let rules: BrokerRules
    package let logger: Logger
    /// A journal backs this broker: ACCEPTED means on disk, and detached jobs are kept.
    package let durable: Bool
    /// Changes on every start, so peers can tell a restarted broker (sent in HEARTBEAT).
    package let epoch: UInt32

    /// In an HA group (DESIGN.md §8b), a member that does not lead: it takes no task, and answers
    /// every peer but a STATUS with DISCONNECT "not the leader" and where the leader is, when it knows.
    /// A broker on its own, and a group's leader, have none.
    package struct Standby: Equatable {
        /// The leader, as the leader key says (nil: none known).
        package var leader: Leadership.Record?
    }

    /// Set while this member of an HA group stands by (``standBy(leader:)``).
    package private(set) var standby: Standby?

    /// Whether the broker serves or stops: the state's dispatch gate is its one record.
    package var phase: Phase { self.state.dispatchPaused ? .stopping : .serving }
    package var state: BrokerState
    package var deadlines = LeaseDeadlines()
    package var pipeline = CommitPipeline()
    package var jobs: DetachedJobs
    /// The effects of the events so far, for the actor to carry out (``takeEffects(into:)``).
    package private(set) var effects: [Effect] = []
    /// The state's actions for one event, reused (``withActions(now:_:)``): an array per task was two
    /// allocations per task.
    private var actionBuffer: [BrokerState.Action] = []
    /// The sequence number the journal gave the last record (it counts from 1).
    package private(set) var journalCount: UInt64 = 0
    /// First ACCEPTEDs not sent yet.
    private var heldAccepted: [HeldAccepted] = []
    /// When each bulk coordinator was last sent what was gathered for it.
    private var lastBulkFlush: [PeerID: ContinuousClock.Instant] = [:]
    private var bulkWakeArmed = false
    /// Bad input dropped, by reason.
    package private(set) var badInput: [String: Int] = [:]
    private var badLog = RateLimitedLog()
    private var limitLog = RateLimitedLog()

    package init(rules: BrokerRules, epoch: UInt32, logger: Logger) {
        self.rules = rules
        self.epoch = epoch
        self.logger = logger
        self.durable = rules.durable
        self.state = BrokerState(heartbeat: rules.heartbeat, maxQueued: rules.maxQueuedTasks)
        self.state.maxPerCoordinator = rules.maxQueuedPerCoordinator
        self.state.prefetchesShortTasks = rules.prefetchesShortTasks
        self.jobs = DetachedJobs(retention: rules.jobRetention)
    }

    /// A member of an HA group that does not lead (yet, or any more): what it answers says where the
    /// leader is. A machine that led is never made a standby: its state belongs to a term that ended, so
    /// the member starts a fresh machine.
    package mutating func standBy(leader: Leadership.Record?) {
        precondition(self.state.workers.isEmpty && self.state.tasks.count == 0, "a standby holds nothing")
        self.standby = Standby(leader: leader)
    }

    /// The member leads: it serves from now (after ``recover(_:now:)`` of what etcd holds).
    package mutating func lead() { self.standby = nil }

    /// A standby's answer to a peer: not the leader, and the leader's endpoint for that peer's port.
    mutating func redirect(_ peer: PeerID, disconnecting: Bool, standby: Standby, worker: Bool) {
        if disconnecting { return }
        let hint = (worker ? standby.leader?.backend : standby.leader?.frontend) ?? ""
        let text = hint.isEmpty ? "" : hint
        self.emit(
            worker
                ? .toWorker(peer, .disconnect(.notLeader, text: text))
                : .toCoordinator(peer, .disconnect(.notLeader, text: text))
        )
    }

    /// The broker's HEARTBEAT: its epoch, and its interval, which peers wait out `liveness` times
    /// before they call it lost.
    package var heartbeat: WireMessage {
        .heartbeat(epoch: self.epoch, intervalMilliseconds: self.rules.heartbeat.intervalMilliseconds)
    }

    /// Hands the effects so far to `body`, in order, and forgets them (for tests and the fuzzer,
    /// whose `body` does not call the machine).
    package mutating func takeEffects(_ body: (Effect) -> Void) {
        for effect in self.effects { body(effect) }
        self.effects.removeAll(keepingCapacity: true)
    }

    /// Moves the effects so far into `buffer` (empty; both keep their storage), so that the owner
    /// can carry them out while it reports back to the machine. Nothing waits when `buffer` is empty
    /// afterwards.
    package mutating func takeEffects(into buffer: inout [Effect]) {
        swap(&self.effects, &buffer)
    }

    package mutating func emit(_ effect: Effect) { self.effects.append(effect) }

    /// ``TaskTable/visitEntry(_:hint:_:)`` on the state's table, in place: called as
    /// `broker.machine.state.tasks.visitEntry(…)` from the actor, the table was copied first (its
    /// three arrays retained and released) for every TASK sent. `body` must not touch the machine.
    package func visitTask(
        _ id: TaskID,
        hint: SlotHint,
        _ body: (UnsafePointer<BrokerState.TaskEntry>) -> Void
    ) -> Bool {
        self.state.tasks.visitEntry(id, hint: hint, body)
    }

    // MARK: The journal

    /// Appends a record whose promise waits for it: messages deferred after this wait for its commit.
    package mutating func journal(_ record: JournalRecord) {
        guard self.durable else { return }
        self.journalCount += 1
        self.pipeline.appended(self.journalCount)
        self.emit(.journal(record))
    }

    /// The journal holds everything up to `seq`: what waited for it goes out.
    package mutating func committed(_ seq: UInt64, now: ContinuousClock.Instant) {
        for released in self.pipeline.committed(seq) {
            if let job = released.coordinator.job {
                // A detached job's final result is on disk: keep it and pass it to its followers.
                if let id = released.result { self.jobResultCommitted(job, id, frames: released.frames, now: now) }
                continue
            }
            self.emit(.frames(released.coordinator, released.frames, keep: released.result))
            // A journal of keys (etcd) holds a result until it is forgotten; a log (the file) drops
            // delivered ones at its next compaction. Sent is as good as delivered here: should the
            // coordinator miss it, it sends the task again to the next broker, which runs it again.
            if self.rules.forgetsDelivered, let id = released.result { self.journal(.delivered(id)) }
        }
    }

    /// What is live, as journal records (a compaction's snapshot): queued and running tasks, kept
    /// results and detached jobs' results.
    package func snapshot() -> [JournalRecord] {
        self.state.snapshot() + self.pipeline.snapshot() + self.jobs.snapshot()
    }

    /// A record for each task and result the journal held at start, queued and kept again.
    /// - Returns: how many tasks were queued again.
    package mutating func recover(_ recovery: JournalRecovery, now: ContinuousClock.Instant) -> Int {
        let grace = now + self.rules.recoveryGrace
        var queued = 0
        // Recovered tasks count as queued from now (the journal keeps no times).
        self.state.advance(to: now)
        for task in recovery.pending
        where self.state.recover(
            task.id,
            attempt: task.attempt,
            envelope: task.envelope,
            input: TaskBytes(task.input),
            coordinator: task.coordinator,
            graceUntil: grace
        ) {
            queued += 1
            if let job = task.coordinator.job {
                // A detached job's task: the job owns it, not a peer that must come back.
                self.state.registerJob(task.coordinator, now: now)
                self.jobs.taskPending(task.id, of: job, kind: task.envelope.kind, input: task.input, now: now)
            }
        }
        for (id, result) in recovery.results.sorted(by: { $0.key < $1.key }) {
            if let job = result.coordinator.job {
                self.jobs.recoverResult(id, of: job, frames: result.frames, now: now)
            } else {
                self.pipeline.keep(id, frames: result.frames, for: result.coordinator, until: grace)
            }
        }
        for (job, key) in recovery.jobOwners { self.jobs.recoverOwner(key, of: job) }
        for (job, name) in recovery.jobNames { _ = self.jobs.name(job, name) }
        return queued
    }

    // MARK: Stopping

    /// A graceful stop begins: no SUBMIT is accepted from now, and nothing more is dispatched.
    package mutating func beginStop() {
        self.state.pauseDispatch()
    }

    /// Nothing runs on a worker and nothing waits for the journal: a stopping broker may go.
    package var isSettled: Bool { self.state.leasedCount == 0 && self.pipeline.isDrained }

    /// The peers to say goodbye to: every worker, and every connected coordinator.
    package var connectedPeers: (workers: [PeerID], coordinators: [PeerID]) {
        (Array(self.state.workers.keys), self.state.coordinators.keys.filter { $0.job == nil })
    }

    // MARK: Carrying out the state's actions

    /// Turns what ``BrokerState`` decided into effects: where each message goes, what the journal
    /// must hold first (durable mode), which ACCEPTEDs wait (memory mode), and a detached job's
    /// results.
    /// Runs `body` with the reused, empty action buffer, then applies what it appended.
    mutating func withActions(now: ContinuousClock.Instant, _ body: (inout Self, inout [BrokerState.Action]) -> Void) {
        var actions: [BrokerState.Action] = []
        swap(&actions, &self.actionBuffer)
        body(&self, &actions)
        if !actions.isEmpty { self.apply(actions, now: now) }
        actions.removeAllKeepingCapacity()
        swap(&actions, &self.actionBuffer)
    }

    package mutating func apply(_ actions: [BrokerState.Action], now: ContinuousClock.Instant) {
        for action in actions {
            switch action {
            case .dispatch(let worker, let id, let hint):
                if let (timeout, attempt) = self.state.tasks.withEntry(
                    id,
                    hint: hint,
                    { ($0.envelope.timeoutMilliseconds, $0.attempt) }
                ),
                    timeout > 0
                {
                    let deadline = now + .milliseconds(timeout) + self.rules.heartbeat.expiry
                    self.deadlines.leased(id, to: worker, attempt: attempt, deadline: deadline)
                }
                self.emit(.task(worker: worker, id, hint: hint))
            case .accepted(let coordinator, let id, let attempt, let requeued, let hint):
                // The message made only where it goes out (a first ACCEPTED is held, its message made
                // when the hold ends).
                if self.durable {
                    // Durable: ACCEPTED only once the SUBMIT (or the new attempt) is on disk.
                    if requeued { self.journal(.attempt(id, attempt)) }
                    if coordinator.job == nil {
                        let message = WireMessage.accepted(id, attempt: attempt, requeued: requeued)
                        self.pipeline.deferUntilCommitted(message.encode(), to: coordinator)
                    }
                } else if requeued {
                    self.emit(.toCoordinator(coordinator, .accepted(id, attempt: attempt, requeued: true)))
                } else {
                    self.holdAccepted(coordinator, id, attempt: attempt, hint: hint)
                }
            case .rejected(let coordinator, let id, let reason, let text):
                if coordinator.job == nil { self.emit(.toCoordinator(coordinator, .rejected(id, reason, text: text))) }
            case .resultForCoordinator(let coordinator, let id, let attempt, let status, let reason):
                let meta = ResultMeta(system: "broker", durationMicroseconds: 0, slot: 0, busy: 0)
                if let job = coordinator.job {
                    self.finishJobTask(job, id, attempt: attempt, status, meta, body: Array(reason.utf8))
                    continue
                }
                self.journal(.forget(id))
                self.emit(
                    .toCoordinator(coordinator, .result(id, attempt: attempt, status, meta, body: Array(reason.utf8)))
                )
            case .cancelOnWorker(let worker, let id):
                self.emit(.toWorker(worker, .cancel(id)))
            case .disconnect(let peer, let reason, let text):
                // A worker dropped by the state (silent past its heartbeats): said here, as
                // ``workerLost(_:reason:now:)`` says the others.
                self.logger.info("worker lost", metadata: ["worker.id": "\(peer)", "reason": "\(text)"])
                self.forgetOutbox(ofWorker: peer, goodbye: .disconnect(reason, text: text))
            case .coordinatorExpired(let peer, let tasks):
                self.logger.info(
                    "coordinator expired after silence",
                    metadata: ["coordinator.id": "\(peer)", "tasks": "\(tasks.count)"]
                )
                for id in tasks { self.journal(.forget(id)) }
                self.jobs.followerLost(peer)
                self.lastBulkFlush[peer] = nil
                // As for a coordinator lost otherwise (``coordinatorLost(_:now:)``): a stalled one's
                // parked messages would stay, retried every few ms. If it is back, it is told afresh.
                self.emit(.dropOutbox(peer, front: true))
            }
        }
    }

    // MARK: Holds

    /// Holds a first ACCEPTED for up to ``acceptedHold``: a task whose RESULT goes out before then
    /// needs none (a RESULT tells its coordinator that the broker had the task), which saves a
    /// short task's coordinator a message and a wake-up. Durable mode does not hold them (an ACCEPTED
    /// there waits for the journal anyway).
    private mutating func holdAccepted(_ coordinator: PeerID, _ id: TaskID, attempt: UInt32, hint: SlotHint) {
        self.heldAccepted.append(HeldAccepted(coordinator: coordinator, id: id, attempt: attempt, hint: hint))
    }

    /// Whether first ACCEPTEDs are held: while it is true, ``acceptedHoldExpired()`` is due
    /// ``acceptedHold`` after it turned true (a broker keeps one timer armed for it, and disarms it
    /// when this turns false). A state to read after each event rather than two effects to carry
    /// out: those were ~650 instructions a round trip when tasks go one at a time.
    package var holdsAccepted: Bool { !self.heldAccepted.isEmpty }

    /// A task's live RESULT goes to its coordinator: its held ACCEPTED is not needed any more (one
    /// wake-up less per round trip when tasks go one at a time).
    package mutating func resultReleasesHold(_ id: TaskID) {
        guard self.heldAccepted.last?.id == id else { return }
        self.heldAccepted.removeLast()
    }

    /// Whether `coordinator`'s SUBMITs said it reads ACCEPTED lists (``Header/readsAcceptedListsFlag``).
    package func readsAcceptedLists(_ coordinator: PeerID) -> Bool {
        self.state.coordinators[coordinator]?.readsAcceptedLists ?? false
    }

    /// The ACCEPTED hold's time is up (or the broker stops): the held ACCEPTEDs of tasks the broker
    /// still has go out (the others got their RESULT).
    package mutating func acceptedHoldExpired() {
        guard !self.heldAccepted.isEmpty else { return }
        var held: [HeldAccepted] = []
        swap(&held, &self.heldAccepted)
        // Room for as many as this hold had (capped), made once: filled from empty, the next hold's
        // list was regrown and copied a dozen times in a deep job (~45 instructions a task).
        self.heldAccepted.reserveCapacity(Swift.min(held.count, Self.keptHeldAccepted))
        held.removeAll { self.state.tasks.coordinator(of: $0.id, hint: $0.hint) != $0.coordinator }
        // Each coordinator's run: as lists of up to acceptedListMost to one that reads them (a message
        // a task cost it ~550 instructions a task of a deep job, and the broker ~250), else as it is.
        var start = held.startIndex
        while start < held.endIndex {
            let coordinator = held[start].coordinator
            var end = start + 1
            while end < held.endIndex, held[end].coordinator == coordinator { end += 1 }
            guard self.readsAcceptedLists(coordinator) else {
                self.emit(.accepted(Array(held[start..<end]), list: false))
                start = end
                continue
            }
            for from in stride(from: start, to: end, by: ProtocolLimits.acceptedListMost) {
                let run = held[from..<Swift.min(from + ProtocolLimits.acceptedListMost, end)]
                self.emit(.accepted(Array(run), list: run.count > 1))
            }
            start = end
        }
    }

    /// Whether what is gathered for `coordinator` waits: a coordinator with many tasks here gets it at
    /// most once per ``bulkGathering`` (its results come in bigger batches, and it is woken less often
    /// while the workers go on at full speed); one with few tasks, at once (a lone task's round trip
    /// is not delayed).
    /// - Returns: `.send`, or `.hold` with the wake-up to arm when none is armed.
    package mutating func holdForBulk(_ coordinator: PeerID, now: ContinuousClock.Instant) -> BulkHold {
        guard let entry = self.state.coordinator(coordinator), entry.taskCount >= Self.bulkTasks else { return .send }
        if let last = self.lastBulkFlush[coordinator], now - last < Self.bulkGathering {
            guard !self.bulkWakeArmed else { return .hold(wakeAfter: nil) }
            self.bulkWakeArmed = true
            return .hold(wakeAfter: last + Self.bulkGathering - now)
        }
        self.lastBulkFlush[coordinator] = now
        return .send
    }

    package enum BulkHold: Equatable {
        case send
        /// Held; with a duration, arm a wake-up (and call ``bulkWoke()`` when it fires).
        case hold(wakeAfter: Duration?)
    }

    /// The bulk hold's wake-up fired (what it held goes out with the flush before the next poll).
    package mutating func bulkWoke() { self.bulkWakeArmed = false }

    /// A coordinator is gone: its bulk timing too.
    package mutating func forgetBulk(_ peer: PeerID) { self.lastBulkFlush[peer] = nil }

    // MARK: Bad input

    /// A message that could not be read: counted by reason and logged a few times a second at most.
    package mutating func badInput(_ error: ProtocolError, from peer: PeerID?, side: String) {
        self.badInput[error.code.description, default: 0] += 1
        self.badLog.log(
            self.logger,
            level: .warning,
            "bad input dropped",
            metadata: ["side": "\(side)", "peer": "\(peer.map(String.init(describing:)) ?? "?")", "reason": "\(error)"]
        )
    }

    /// A rate-limited warning for refusals at a limit.
    package mutating func limitWarning(_ message: Logger.Message, peer: PeerID) {
        self.limitLog.log(self.logger, level: .warning, message, metadata: ["peer": "\(peer)"])
    }
}
