import DequeModule
import Glibc
public import Logging
public import ServiceLifecycle
public import ZeroMQ

/// The broker: a queue of ScanTasks between coordinators (frontend ROUTER) and workers (backend
/// ROUTER), with credit dispatch, leases and heartbeats (DESIGN.md §§2–6).
///
/// It runs on a ``Reactor``: that thread is the actor's executor, owns both sockets, and calls the
/// socket handlers, so no message ever waits for a Swift concurrency thread. The bookkeeping is
/// ``BrokerState``; this actor only moves frames and carries out the state's actions. Bad input is
/// dropped, counted by reason and logged at most a few times a second; it is never fatal.
public actor Broker: Service {
    /// The bound endpoints, with real ports when bound to `*`.
    public struct Endpoints: Sendable, Equatable {
        public let frontend: String
        public let backend: String
    }

    public nonisolated let reactor: Reactor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    private let configuration: BrokerConfiguration
    private let logger: Logger
    /// Changes on every start, so peers can tell a restarted broker (sent in HEARTBEAT).
    public nonisolated let epoch: UInt32

    private enum Lifecycle {
        case idle
        case running(frontend: Socket, backend: Socket, endpoints: Endpoints)
        case stopped
    }

    private var lifecycle = Lifecycle.idle
    private var state: BrokerState
    private var frontOutbox = Outbox()
    private var backOutbox = Outbox()
    private var flushTimer: TimerID?
    private var heartbeatTimer: TimerID?
    private var flushHook: TimerID?
    /// First ACCEPTEDs not sent yet (see ``holdAccepted(_:_:attempt:)``).
    private var heldAccepted: [(coordinator: PeerID, id: TaskID, attempt: UInt32)] = []
    private var acceptedTimer: TimerID?
    /// Made once: a closure made for every held ACCEPTED would be an allocation per task.
    private lazy var acceptedTimerFired: () -> Void = { [weak self] in
        self?.assumeIsolated { broker in
            broker.acceptedTimer = nil
            broker.sendHeldAccepted()
        }
    }
    static let acceptedHold = Duration.milliseconds(2)
    /// See ``holdForBulk(_:now:)``.
    static let bulkTasks = 64
    static let bulkGathering = Duration.milliseconds(1)
    private var lastBulkFlush: [PeerID: ContinuousClock.Instant] = [:]
    private var bulkTimer: TimerID?
    private var badInput: [String: Int] = [:]
    /// Senders seen last (see ``routedPeer(_:side:)``).
    private var recentPeers: [PeerID] = []
    private var nextRecentPeer = 0
    static let recentPeerCount = 16
    private var badLog = RateLimitedLog()

    // Durable mode (DESIGN.md §8).
    /// A message that may leave only once the journal holds everything up to `seq`.
    private struct Deferred {
        let seq: UInt64
        let coordinator: PeerID
        let frames: [[UInt8]]
        /// A RESULT for this task: kept for its coordinator if it cannot be delivered now.
        let result: TaskID?
    }
    private struct StoredResult {
        let coordinator: PeerID
        let frames: [[UInt8]]
        let expires: ContinuousClock.Instant
    }
    /// Leases of tasks with a deadline: when the worker has not answered by the task's timeout plus
    /// the heartbeat expiry, the lease expires.
    private var leaseDeadlines: [TaskID: (worker: PeerID, attempt: UInt32, deadline: ContinuousClock.Instant)] = [:]
    private var journal: Journal?
    private var lastAppended: UInt64 = 0
    private var committed: UInt64 = 0
    /// Graceful shutdown has begun: SUBMITs are not accepted, nothing is dispatched.
    private var stopping = false
    private var deferred = Deque<Deferred>()
    /// Results recovered from the journal or undeliverable, until their coordinator asks again.
    private var storedResults: [TaskID: StoredResult] = [:]
    /// Detached jobs (durable mode only): their results and followers.
    private var jobs: [TaskID: JobRecord] = [:]
    private var compactedBytes = 0
    /// What the journal held when the broker started (nil without a journal).
    public private(set) var recovered: (tasks: Int, results: Int, records: Int, droppedBytes: Int)?

    /// Creates a broker; ``start()`` or ``run()`` binds it.
    public init(configuration: BrokerConfiguration = BrokerConfiguration(), reactor: Reactor, logger: Logger) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        self.state = BrokerState(heartbeat: configuration.heartbeat, maxQueued: configuration.maxQueuedTasks)
        self.epoch = UInt32.random(in: 1...UInt32.max)
    }

    /// Opens the journal (in durable mode), binds both sockets and starts serving.
    /// - Returns: the bound endpoints (with the real ports when bound to `*`).
    /// - Throws: ``JournalError`` when the journal cannot be opened; ``ZMQError`` when an endpoint is
    ///   invalid or in use; nothing is left bound then.
    @discardableResult
    public func start() throws -> Endpoints {
        switch self.lifecycle {
        case .running(_, _, let endpoints): return endpoints
        case .stopped: throw ZMQError(code: ZMQError.terminatedCode, operation: "start a stopped broker")
        case .idle: break
        }
        try self.openJournal()
        let frontend = try Socket(self.reactor.context, type: .router)
        let backend = try Socket(self.reactor.context, type: .router)
        do throws(ZMQError) {
            try SocketSetup.router(frontend)
            try SocketSetup.router(backend)
            try frontend.bind(self.configuration.frontend)
            try backend.bind(self.configuration.backend)
        } catch {
            frontend.close()
            backend.close()
            throw error
        }
        let endpoints = Endpoints(frontend: try frontend.lastEndpoint(), backend: try backend.lastEndpoint())
        self.lifecycle = .running(frontend: frontend, backend: backend, endpoints: endpoints)
        // The per-turn handlers are closures isolated to this actor, holding it strongly until stop()
        // unregisters them (coordinators and workers do the same until close()): called on the
        // reactor, the actor's executor, they run at once. `[weak self] in self?.assumeIsolated {…}`
        // cost about 900 instructions a call (two executor checks, an allocation and a thunk), ~8% of
        // the broker's and the worker's own instructions per round trip (`make instructions`).
        self.reactor.register(frontend) { self.drainFrontend() }
        self.reactor.register(backend) { self.drainBackend() }
        self.heartbeatTimer = self.reactor.schedule(
            after: self.configuration.heartbeat.interval,
            every: self.configuration.heartbeat.interval
        ) { [weak self] in self?.assumeIsolated { $0.heartbeatTick() } }
        self.flushHook = self.reactor.beforePoll { self.flushGathered() }
        self.logger.info(
            "broker listening",
            metadata: [
                "frontend": "\(endpoints.frontend)", "backend": "\(endpoints.backend)", "epoch": "\(self.epoch)",
            ]
        )
        return endpoints
    }

    /// Opens the journal (durable mode) and queues what it held again. Call before ``start()``;
    /// ``start()`` calls it for you when the configuration names a journal.
    /// - Throws: ``JournalError`` when the file cannot be opened or read, or another broker holds it.
    public func openJournal() throws(JournalError) {
        guard self.journal == nil, let path = self.configuration.journalPath else { return }
        let clock = ContinuousClock()
        let began = clock.now
        let logger = self.logger
        let (journal, recovery) = try Journal.open(
            path: path,
            onCommit: { [weak self] seq in
                guard let self else { return }
                Task { await self.journalCommitted(seq) }
            },
            onFailure: { error in
                // Crash-only: what is on disk is consistent up to the last commit; nothing after it was
                // acknowledged, so a restart on the same journal loses nothing that was promised.
                logger.critical("journal failed; stopping the broker", metadata: ["error": "\(error)"])
                exit(74)
            }
        )
        self.journal = journal
        let grace = ContinuousClock.now + self.configuration.recoveryGrace
        var queued = 0
        let now = ContinuousClock.now
        for task in recovery.pending
        where self.state.recover(
            task.id,
            attempt: task.attempt,
            envelope: task.envelope,
            input: task.input,
            coordinator: task.coordinator,
            graceUntil: grace
        ) {
            queued += 1
            if let job = task.coordinator.job {
                // A detached job's task: the job owns it, not a peer that must come back.
                self.state.registerJob(task.coordinator, now: now)
                self.jobs[job, default: JobRecord(now: now)].inputs[task.id] = (task.envelope.kind, task.input)
            }
        }
        for (id, result) in recovery.results.sorted(by: { $0.key < $1.key }) {
            if let job = result.coordinator.job {
                _ = self.jobs[job, default: JobRecord(now: now)].store(id, frames: result.frames, now: now)
                continue
            }
            self.storedResults[id] = StoredResult(
                coordinator: result.coordinator,
                frames: result.frames,
                expires: grace
            )
        }
        self.recovered = (queued, recovery.results.count, recovery.records, recovery.droppedBytes)
        self.compactJournal()
        self.logger.info(
            "journal opened",
            metadata: [
                "path": "\(path)", "queued": "\(queued)", "results": "\(recovery.results.count)",
                "records": "\(recovery.records)", "bytes": "\(recovery.fileBytes)",
                "torn.bytes": "\(recovery.droppedBytes)",
                "took": "\(DurationParser.format(clock.now - began))",
            ]
        )
        if recovery.droppedBytes > 0 {
            self.logger.warning(
                "journal had a torn tail (a crash mid-write); it was cut off",
                metadata: ["bytes": "\(recovery.droppedBytes)"]
            )
        }
    }

    /// Serves until graceful shutdown (SIGTERM/SIGINT in a `ServiceGroup`) or cancellation, then stops.
    public func run() async throws {
        if case .idle = self.lifecycle { try self.start() }
        // Wait here; the reactor serves the sockets meanwhile. Returns on shutdown or cancellation.
        try? await gracefulShutdown()
        await self.finishInFlight()
        self.stop()
    }

    /// Graceful shutdown: take no new tasks, dispatch none, and wait up to the shutdown grace for the
    /// results of tasks running on workers (and, durable, for the journal to hold them) so they reach
    /// their coordinators. Tasks still queued or running after that stay in the journal (durable) or
    /// go to their coordinators' retry policy when they hear the broker stop.
    private func finishInFlight() async {
        guard case .running = self.lifecycle, !Task.isCancelled else { return }
        self.stopping = true
        self.state.dispatchPaused = true
        let clock = ContinuousClock()
        let began = clock.now
        let deadline = began + self.configuration.shutdownGrace
        let leased = self.state.leasedCount
        if leased > 0 {
            self.logger.info(
                "stopping: waiting for running tasks",
                metadata: [
                    "running": "\(leased)", "grace": "\(DurationParser.format(self.configuration.shutdownGrace))",
                ]
            )
        }
        while self.state.leasedCount > 0 || !self.deferred.isEmpty, clock.now < deadline, !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let left = self.state.leasedCount
        if left > 0 {
            let fate =
                self.journal != nil
                ? "they stay in the journal and run again after a restart"
                : "their coordinators' retry policy takes them"
            self.logger.warning(
                "stopping with tasks still running after the grace period; \(fate)",
                metadata: ["running": "\(left)"]
            )
        } else if leased > 0 {
            self.logger.info(
                "running tasks finished",
                metadata: ["tasks": "\(leased)", "took": "\(DurationParser.format(clock.now - began))"]
            )
        }
    }

    /// Tells every peer the broker is going away, then closes both sockets.
    public func stop() {
        guard case .running(let frontend, let backend, _) = self.lifecycle else {
            self.lifecycle = .stopped
            return
        }
        // Messages held, gathered and parked behind a full pipe go first, in order, as far as they can.
        self.sendHeldAccepted()
        self.flushGathered(all: true)
        _ = try? self.frontOutbox.flush(on: frontend)
        _ = try? self.backOutbox.flush(on: backend)
        let goodbye = WireMessage.disconnect(.shutdown, text: "broker stopping").encode()
        for worker in self.state.workers.keys { _ = try? backend.send([worker.bytes] + goodbye) }
        for coordinator in self.state.coordinators.keys where coordinator.job == nil {
            _ = try? frontend.send([coordinator.bytes] + goodbye)
        }
        if let timer = self.heartbeatTimer { self.reactor.cancel(timer) }
        if let timer = self.flushTimer { self.reactor.cancel(timer) }
        if let hook = self.flushHook { self.reactor.cancel(hook) }
        if let timer = self.acceptedTimer { self.reactor.cancel(timer) }
        if let timer = self.bulkTimer { self.reactor.cancel(timer) }
        self.reactor.unregister(frontend)
        self.reactor.unregister(backend)
        // The last forwarded RESULTs and the goodbyes may still be in libzmq's queues: give them up to
        // a second to leave (closing with the sockets' linger of 0 would drop them, and a coordinator
        // would then wait out its broker timeout for results the broker had already sent).
        try? frontend.set(.linger(milliseconds: 1000))
        try? backend.set(.linger(milliseconds: 1000))
        frontend.close()
        backend.close()
        self.lifecycle = .stopped
        self.journal?.close()
        self.logger.info("broker stopped", metadata: ["queued": "\(self.state.queueDepth)"])
    }

    /// The bound endpoints, once started.
    public var endpoints: Endpoints? {
        if case .running(_, _, let endpoints) = self.lifecycle { return endpoints }
        return nil
    }

    /// A snapshot of workers, queues and counters.
    public func status() -> BrokerStatus {
        BrokerStatus(
            state: self.state,
            epoch: self.epoch,
            badInput: self.badInput,
            parked: self.frontOutbox.count + self.backOutbox.count
        )
    }

    // MARK: Workers (backend)

    private func drainBackend() {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            try backend.receiveBatch { message in
                if self.journal == nil, message.count == 3, !message.overflowed, message.size(of: 1) == Header.size,
                    message.withBytes(of: 1, { $0[3] }) == Command.batch.rawValue
                {
                    return self.handleWorkerBatch(message)
                }
                if self.journal == nil, message.count == 4, !message.overflowed, message.size(of: 1) == Header.size,
                    message.withBytes(of: 1, { $0[3] }) == Command.result.rawValue
                {
                    return self.handleWorkerResult(&message)
                }
                guard let (peer, result) = self.decodeRouted(message, side: "backend") else { return }
                switch result {
                case .failure(let error):
                    self.workerBrokeProtocol(peer, error)
                case .success(.batch(let messages)):
                    for frames in messages {
                        let decoded: WireMessage
                        do throws(ProtocolError) {
                            decoded = try WireMessage.decode(frames)
                        } catch {
                            self.rejectInput(error, from: peer, side: "backend")
                            self.workerBrokeProtocol(peer, error)
                            return
                        }
                        guard let forward = self.handleWorker(peer, decoded) else { continue }
                        self.forward(forward, decoded, frames: frames)
                    }
                case .success(let decoded):
                    guard let forward = self.handleWorker(peer, decoded) else { return }
                    if self.journal == nil {
                        self.forwardToCoordinator(forward.coordinator, &message)
                    } else {
                        self.forward(forward, decoded, frames: message.allBytes(from: 1))
                    }
                }
            }
        } catch {
            self.logger.error("backend receive failed", metadata: ["error": "\(error)"])
        }
    }

    private func workerBrokeProtocol(_ peer: PeerID, _ error: ProtocolError) {
        guard self.state.workers[peer] != nil else { return }
        let reason: DisconnectReason = error.code == .badVersion ? .version : .protocolError
        self.sendToWorker(peer, .disconnect(reason, text: error.description))
        self.perform(self.state.workerLost(peer, reason: "protocol error"))
    }

    /// A worker's RESULT or PROGRESS that goes on to its coordinator as it came.
    private struct Forward {
        let coordinator: PeerID
        /// A RESULT's task: in durable mode it is journaled before it is forwarded.
        let result: TaskID?
    }

    /// Forwards a worker's message (its frames after the routing id) to its coordinator; a durable
    /// broker journals a RESULT first and forwards it once the journal holds it.
    private func forward(_ forward: Forward, _ decoded: WireMessage, frames: [[UInt8]]) {
        if let id = forward.result, let journal = self.journal {
            self.lastAppended = journal.append(.result(id, coordinator: forward.coordinator, frames: frames))
            self.deferred.append(
                Deferred(seq: self.lastAppended, coordinator: forward.coordinator, frames: frames, result: id)
            )
        } else {
            self.sendFrames(frames, to: forward.coordinator, keepingResult: nil)
        }
    }

    /// A worker's RESULT for `id`: its lease ends and its credit returns (more is dispatched), and the
    /// disposition says where it goes. `entry` is the task as it was, looked up only when detached jobs
    /// exist (they need it after the state has removed it).
    private func resultArrived(
        from peer: PeerID,
        _ id: TaskID,
        attempt: UInt32,
        now: ContinuousClock.Instant
    ) -> (BrokerState.ResultDisposition, BrokerState.TaskEntry?) {
        if !self.leaseDeadlines.isEmpty, let lease = self.leaseDeadlines[id], lease.worker == peer,
            lease.attempt == attempt
        {
            self.leaseDeadlines[id] = nil
        }
        let entry = self.jobs.isEmpty ? nil : self.state.tasks[id]
        let (disposition, actions) = self.state.workerResult(peer, taskID: id, attempt: attempt, now: now)
        switch disposition {
        case .forward:
            // A lone task's held ACCEPTED is not needed any more: drop it, and the timer with it (one
            // wake-up less per round trip when tasks go one at a time).
            if self.heldAccepted.last?.id == id {
                self.heldAccepted.removeLast()
                if self.heldAccepted.isEmpty, let timer = self.acceptedTimer {
                    self.reactor.cancel(timer)
                    self.acceptedTimer = nil
                }
            }
        case .stale:
            self.logger.debug("stale result dropped", metadata: ["task.id": "\(id)", "attempt": "\(attempt)"])
        case .unknownWorker:
            self.sendToWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY"))
        }
        self.perform(actions)
        return (disposition, entry)
    }

    /// A worker's RESULT alone without a journal: checked in place, and forwarded as it came.
    private func handleWorkerResult(_ message: inout Multipart) {
        guard let peer = self.routedPeer(message, side: "backend") else { return }
        let checked = message.withFrames(from: 1) { frames in
            Result { () throws(ProtocolError) -> ResultView? in try ResultView(frames) }
        }
        switch checked {
        case .success(let result?):
            let (disposition, _) = self.resultArrived(from: peer, result.taskID, attempt: result.attempt, now: .now)
            if case .forward(let coordinator) = disposition { self.forwardToCoordinator(coordinator, &message) }
        case .success(nil):
            break
        case .failure(let error):
            self.rejectInput(error, from: peer, side: "backend")
            self.workerBrokeProtocol(peer, error)
        }
    }

    /// A worker's BATCH without a journal: its RESULTs are checked and forwarded in place, each
    /// appended to its coordinator's gathered messages as it came (no frames built, nothing
    /// re-encoded); anything else inside is decoded as usual. A bad message ends the BATCH and the
    /// worker, as it would alone.
    private func handleWorkerBatch(_ message: borrowing Multipart) {
        guard let peer = self.routedPeer(message, side: "backend") else { return }
        let now = ContinuousClock.now
        var failure: ProtocolError?
        do throws(ProtocolError) {
            let header = try message.withBytes(of: 1) { bytes throws(ProtocolError) in try Header.decode(bytes) }
            try message.withBytes(of: 2) { bytes throws(ProtocolError) in
                try Batch.forEach(bytes, count: header.arg) { packed in
                    guard failure == nil else { return }
                    do throws(ProtocolError) {
                        if let result = try ResultView(packed) {
                            let (disposition, _) = self.resultArrived(
                                from: peer,
                                result.taskID,
                                attempt: result.attempt,
                                now: now
                            )
                            if case .forward(let coordinator) = disposition {
                                self.forwardPacked(packed.raw, to: coordinator)
                            }
                        } else if let forward = self.handleWorker(peer, try WireMessage.decode(packed)) {
                            // A PROGRESS: on to its coordinator as it came.
                            self.forwardPacked(packed.raw, to: forward.coordinator)
                        }
                    } catch {
                        failure = error
                    }
                }
            }
        } catch {
            failure = error
        }
        if let failure {
            self.rejectInput(failure, from: peer, side: "backend")
            self.workerBrokeProtocol(peer, failure)
        }
    }

    /// Handles one message from a worker; returns where it goes on to when it is a RESULT or PROGRESS
    /// for a coordinator.
    private func handleWorker(_ peer: PeerID, _ decoded: WireMessage) -> Forward? {
        let now = ContinuousClock.now
        switch decoded {
        case .ready(let capacity, let info):
            let known = self.state.workers[peer] != nil
            self.perform(self.state.workerReady(peer, capacity: Int(capacity), info: info, now: now))
            self.logger.info(
                known ? "worker re-registered" : "worker registered",
                metadata: [
                    "worker.id": "\(peer)", "worker.name": "\(info.name)", "slots": "\(capacity)",
                    "kinds": "\(info.kinds.joined(separator: ","))",
                ]
            )
        case .heartbeat:
            if !self.state.workerSeen(peer, now: now) {
                self.sendToWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY"))
            }
        case .disconnect(.draining, _):
            _ = self.state.workerSeen(peer, now: now)
            self.perform(self.state.workerDraining(peer))
            self.logger.info("worker draining", metadata: ["worker.id": "\(peer)"])
        case .disconnect(let reason, let text):
            if self.state.workers[peer] != nil {
                self.logger.info("worker left", metadata: ["worker.id": "\(peer)", "reason": "\(reason): \(text)"])
                self.perform(self.state.workerLost(peer, reason: "disconnected: \(reason)"))
            }
        case .result(let id, let attempt, let status, let meta, let body):
            let (disposition, entry) = self.resultArrived(from: peer, id, attempt: attempt, now: now)
            guard case .forward(let coordinator) = disposition else { return nil }
            guard let job = coordinator.job else { return Forward(coordinator: coordinator, result: id) }
            if let entry { self.jobAttemptEnded(job, entry, status, meta, body: body, now: now) }
        case .progress(let id, let attempt, _):
            _ = self.state.workerSeen(peer, now: now)
            if let entry = self.state.tasks[id], entry.worker == peer, entry.attempt == attempt {
                return Forward(coordinator: entry.coordinator, result: nil)
            }
        case .submit, .accepted, .rejected, .task, .cancel, .statusRequest, .statusReply, .submitToJob, .jobQuery,
            .jobCancel, .jobReply, .jobResult, .batch:
            self.rejectInput(
                ProtocolError(.wrongDirection, "worker sent \(decoded.commandName)"),
                from: peer,
                side: "backend"
            )
        }
        return nil
    }

    // MARK: Coordinators (frontend)

    private func drainFrontend() {
        guard case .running(let frontend, _, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            try frontend.receiveBatch { message in
                guard let peer = self.routedPeer(message, side: "frontend") else { return }
                do throws(ProtocolError) {
                    let batch = try WireMessage.visit(message, from: 1) { decoded in
                        switch decoded {
                        case .success(let decoded): self.handleCoordinator(peer, decoded)
                        case .failure(let error): self.rejectInput(error, from: peer, side: "frontend")
                        }
                        return true
                    }
                    // A BATCH of SUBMITs may have filled every free slot: those TASKs leave now, not
                    // after the coordinator's next thousand SUBMITs have been handled too.
                    if batch { self.flushGathered(workersOnly: true) }
                } catch {
                    self.rejectInput(error, from: peer, side: "frontend")
                    if error.code == .badVersion {
                        self.sendToCoordinator(peer, .disconnect(.version, text: error.description))
                    }
                }
            }
        } catch {
            self.logger.error("frontend receive failed", metadata: ["error": "\(error)"])
        }
    }

    private func handleCoordinator(_ peer: PeerID, _ decoded: WireMessage) {
        let now = ContinuousClock.now
        if self.state.takeExpiredNotice(peer) {
            // We forgot this coordinator while it was silent: it must send its unfinished tasks again.
            self.logger.info(
                "expired coordinator is back; asking it to resend",
                metadata: ["coordinator.id": "\(peer)"]
            )
            self.sendToCoordinator(
                peer,
                .disconnect(.unknownPeer, text: "expired after silence; send unfinished tasks again")
            )
        }
        switch decoded {
        case .submit(let id, let attempt, let envelope, let input):
            if self.stopping {
                // Not ACCEPTED: the task stays its coordinator's, which sends it again to the next
                // broker or hands it to its retry policy when it hears this one stop.
                self.state.coordinatorSeen(peer, now: now)
                return
            }
            if let stored = self.storedResults[id], stored.coordinator == peer {
                // A resend after a restart of a task whose result is already here: that result again.
                self.state.coordinatorSeen(peer, now: now)
                self.storedResults[id] = nil
                self.journal?.append(.forget(id))
                self.sendFrames(stored.frames, to: peer, keepingResult: nil)
                return
            }
            // Durable mode journals a task the first time it is accepted (the lookup is for that only).
            let isNew = self.journal != nil && self.state.tasks[id] == nil
            let actions = self.state.submit(
                id,
                attempt: attempt,
                envelope: envelope,
                input: input,
                from: peer,
                now: now
            )
            if isNew, self.state.tasks[id] != nil, let journal = self.journal {
                self.lastAppended = journal.append(
                    .submit(id, coordinator: peer, attempt: attempt, envelope, input: input)
                )
            }
            self.perform(actions)
        case .heartbeat:
            if self.state.coordinatorSeen(peer, now: now) {
                // A new coordinator: answer at once, so it knows within one round trip that we are here.
                self.sendToCoordinator(peer, .heartbeat(epoch: self.epoch))
            }
        case .submitToJob(let id, let attempt, let envelope, let input, let job):
            self.state.coordinatorSeen(peer, now: now)
            if self.stopping { return }
            self.submitToJob(id, attempt: attempt, envelope, input: input, job: job, from: peer, now: now)
        case .jobQuery(let job, let follow):
            self.state.coordinatorSeen(peer, now: now)
            self.answerJobQuery(job, follow: follow, from: peer)
        case .jobCancel(let job):
            self.state.coordinatorSeen(peer, now: now)
            self.cancelJob(job, from: peer)
        case .cancel(let id):
            self.state.coordinatorSeen(peer, now: now)
            self.perform(self.state.cancel(id, from: peer))
        case .statusRequest:
            self.sendToCoordinator(peer, .statusReply(json: self.status().json()))
        case .disconnect:
            self.coordinatorLost(peer)
            self.frontOutbox.drop(peer)
        case .ready, .accepted, .rejected, .task, .result, .progress, .statusReply, .jobReply, .jobResult, .batch:
            self.rejectInput(
                ProtocolError(.wrongDirection, "coordinator sent \(decoded.commandName)"),
                from: peer,
                side: "frontend"
            )
        }
    }

    // MARK: Actions and sending

    private func perform(_ actions: [BrokerState.Action]) {
        for action in actions {
            switch action {
            case .dispatch(let worker, let id):
                self.sendTask(id, to: worker)
            case .accepted(let coordinator, let id, let attempt, let requeued):
                let message = WireMessage.accepted(id, attempt: attempt, requeued: requeued)
                if let journal = self.journal {
                    // Durable: ACCEPTED only once the SUBMIT (or the new attempt) is on disk.
                    if requeued { self.lastAppended = journal.append(.attempt(id, attempt)) }
                    self.deferred.append(
                        Deferred(
                            seq: self.lastAppended,
                            coordinator: coordinator,
                            frames: message.encode(),
                            result: nil
                        )
                    )
                } else if requeued {
                    self.sendToCoordinator(coordinator, message)
                } else {
                    self.holdAccepted(coordinator, id, attempt: attempt)
                }
            case .rejected(let coordinator, let id, let reason, let text):
                self.sendToCoordinator(coordinator, .rejected(id, reason, text: text))
            case .resultForCoordinator(let coordinator, let id, let attempt, let status, let reason):
                if let job = coordinator.job {
                    let meta = ResultMeta(system: "broker", durationMicroseconds: 0, slot: 0, busy: 0)
                    self.finishJobTask(job, id, attempt: attempt, status, meta, body: Array(reason.utf8))
                    continue
                }
                self.journal?.append(.forget(id))
                let meta = ResultMeta(system: "broker", durationMicroseconds: 0, slot: 0, busy: 0)
                self.sendToCoordinator(
                    coordinator,
                    .result(id, attempt: attempt, status, meta, body: Array(reason.utf8))
                )
            case .cancelOnWorker(let worker, let id):
                self.sendToWorker(worker, .cancel(id))
            case .disconnect(let peer, let reason, let text):
                self.sendToWorker(peer, .disconnect(reason, text: text))
            }
        }
    }

    /// Holds a first ACCEPTED for up to ``acceptedHold``: a task whose RESULT goes out before then
    /// needs none (a RESULT tells its coordinator that the broker had the task), which saves a
    /// short task's coordinator a message and a wake-up. Durable mode does not hold them (an ACCEPTED
    /// there waits for the journal anyway).
    private func holdAccepted(_ coordinator: PeerID, _ id: TaskID, attempt: UInt32) {
        self.heldAccepted.append((coordinator, id, attempt))
        guard self.acceptedTimer == nil else { return }
        self.acceptedTimer = self.reactor.schedule(after: Self.acceptedHold, self.acceptedTimerFired)
    }

    /// Sends the held ACCEPTEDs of tasks the broker still has (the others got their RESULT).
    private func sendHeldAccepted() {
        let held = self.heldAccepted
        self.heldAccepted.removeAll(keepingCapacity: true)
        for (coordinator, id, attempt) in held where self.state.tasks.coordinator(of: id) == coordinator {
            self.sendToCoordinator(coordinator, .accepted(id, attempt: attempt, requeued: false))
        }
    }

    // MARK: Detached jobs (durable mode)

    /// A SUBMIT for a detached job: the job owns the task; ACCEPTED goes to the sender once the
    /// task is on disk.
    private func submitToJob(
        _ id: TaskID,
        attempt: UInt32,
        _ envelope: TaskEnvelope,
        input: [UInt8],
        job: TaskID,
        from peer: PeerID,
        now: ContinuousClock.Instant
    ) {
        guard let journal = self.journal else {
            self.sendToCoordinator(
                peer,
                .rejected(id, .invalid, text: "detached jobs need a durable broker (start it with --journal)")
            )
            return
        }
        let owner = PeerID.job(job)
        if self.jobs[job]?.results[id] != nil {
            // A resend of a task that already finished: it was accepted.
            self.sendToCoordinator(peer, .accepted(id, attempt: attempt, requeued: false))
            return
        }
        self.state.registerJob(owner, now: now)
        let isNew = self.state.tasks[id] == nil
        let actions = self.state.submit(id, attempt: attempt, envelope: envelope, input: input, from: owner, now: now)
        if isNew, self.state.tasks[id] != nil {
            self.jobs[job, default: JobRecord(now: now)].inputs[id] = (envelope.kind, input)
            self.jobs[job]!.lastActivity = now
            self.lastAppended = journal.append(
                .submit(id, coordinator: owner, attempt: attempt, envelope, input: input)
            )
        }
        // The answers to the SUBMIT go to its sender.
        self.perform(
            actions.map { action in
                switch action {
                case .accepted(owner, let id, let attempt, let requeued):
                    .accepted(coordinator: peer, id, attempt: attempt, requeued: requeued)
                case .rejected(owner, let id, let reason, let text):
                    .rejected(coordinator: peer, id, reason, text)
                default: action
                }
            }
        )
    }

    /// A detached job's attempt ended on a worker: a failure with attempts left runs again (the
    /// broker retries for a job, at once); anything else is the task's final result.
    private func jobAttemptEnded(
        _ job: TaskID,
        _ entry: BrokerState.TaskEntry,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: [UInt8],
        now: ContinuousClock.Instant
    ) {
        let owner = PeerID.job(job)
        let retryable = status == .failed || status == .timedOut
        if retryable, entry.attempt < UInt32(entry.envelope.maxAttempts), !(self.jobs[job]?.cancelling ?? false) {
            let next = entry.attempt + 1
            let actions = self.state.submit(
                entry.id,
                attempt: next,
                envelope: entry.envelope,
                input: entry.input,
                from: owner,
                now: now
            )
            if self.state.tasks[entry.id] != nil, let journal = self.journal {
                self.lastAppended = journal.append(.attempt(entry.id, next))
            }
            self.perform(actions.filter { if case .accepted = $0 { false } else { true } })
            self.logger.debug("job task retried", metadata: ["task.id": "\(entry.id)", "attempt": "\(next)"])
            return
        }
        self.finishJobTask(job, entry.id, attempt: entry.attempt, status, meta, body: body)
    }

    /// Journals a detached job's final result; it is kept and sent to followers once on disk.
    private func finishJobTask(
        _ job: TaskID,
        _ id: TaskID,
        attempt: UInt32,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: [UInt8]
    ) {
        guard let journal = self.journal, let task = self.jobs[job]?.inputs[id] else {
            self.logger.error("a detached job's result has no task to go with; dropped", metadata: ["task.id": "\(id)"])
            return
        }
        self.logger.debug("job task finished", metadata: ["task.id": "\(id)", "status": "\(status)"])
        let frames = WireMessage.jobResult(
            job: job,
            id,
            attempt: attempt,
            status,
            meta,
            body: body,
            kind: task.kind,
            input: task.input
        ).encode()
        self.lastAppended = journal.append(.result(id, coordinator: .job(job), frames: frames))
        self.deferred.append(Deferred(seq: self.lastAppended, coordinator: .job(job), frames: frames, result: id))
    }

    private func jobResultCommitted(_ job: TaskID, _ id: TaskID, frames: [[UInt8]]) {
        guard self.jobs[job]?.store(id, frames: frames, now: .now) == true else { return }
        let followers = self.jobs[job]!.followers
        for follower in followers { self.sendFrames(frames, to: follower, keepingResult: nil) }
        let status = self.jobStatus(job)
        if status.done, !followers.isEmpty {
            self.jobs[job]!.followers.removeAll()
            for follower in followers { self.sendToCoordinator(follower, .jobReply(job: job, json: status.json())) }
        }
    }

    private func jobStatus(_ job: TaskID) -> JobStatus {
        guard self.journal != nil else {
            return JobStatus(job: "\(job)", error: "this broker keeps no jobs (start it with --journal)")
        }
        guard let record = self.jobs[job] else {
            let hours = DurationParser.format(self.configuration.jobRetention)
            return JobStatus(job: "\(job)", error: "unknown job \(job) (finished jobs are kept for \(hours))")
        }
        // Queued, running, or finished but not yet on disk: every task without a stored result.
        let pending = record.inputs.keys
        return JobStatus(
            job: "\(job)",
            tasks: record.results.count + pending.count,
            completed: record.completed,
            failed: record.failed,
            cancelled: record.cancelled,
            pending: pending.count,
            pendingIDs: pending.sorted().prefix(100).map { "\($0)" },
            cancelling: record.cancelling
        )
    }

    /// Sends a job's results so far, then its status; a follower also gets the rest as they come.
    private func answerJobQuery(_ job: TaskID, follow: Bool, from peer: PeerID) {
        let status = self.jobStatus(job)
        if status.error == nil, let record = self.jobs[job] {
            for id in record.order {
                if let frames = record.results[id] { self.sendFrames(frames, to: peer, keepingResult: nil) }
            }
            if follow && !status.done { self.jobs[job]!.followers.insert(peer) }
        }
        self.sendToCoordinator(peer, .jobReply(job: job, json: status.json()))
    }

    /// Cancels a job's unfinished tasks: queued ones end at once, running ones on their workers.
    private func cancelJob(_ job: TaskID, from peer: PeerID) {
        if self.jobs[job] != nil {
            self.jobs[job]!.cancelling = true
            let owner = PeerID.job(job)
            for id in self.state.tasks(of: owner) {
                self.perform(self.state.cancel(id, from: owner))
            }
            self.logger.info("job cancelled", metadata: ["job": "\(job)"])
        }
        self.sendToCoordinator(peer, .jobReply(job: job, json: self.jobStatus(job).json()))
    }

    /// Forgets finished jobs whose last result is older than the retention.
    private func expireJobs(now: ContinuousClock.Instant) {
        for (job, record) in self.jobs where now - record.lastActivity > self.configuration.jobRetention {
            let owner = PeerID.job(job)
            guard record.inputs.isEmpty, (self.state.coordinators[owner]?.taskCount ?? 0) == 0 else { continue }
            for id in record.order { self.journal?.append(.forget(id)) }
            self.jobs[job] = nil
            self.state.forgetJob(owner)
            self.logger.info("finished job forgotten", metadata: ["job": "\(job)", "results": "\(record.order.count)"])
        }
    }

    /// A coordinator is gone: its tasks are dropped (and forgotten by the journal).
    private func coordinatorLost(_ peer: PeerID) {
        for job in self.jobs.keys where self.jobs[job]!.followers.contains(peer) {
            self.jobs[job]!.followers.remove(peer)
        }
        if let journal = self.journal {
            for id in self.state.tasks(of: peer) { journal.append(.forget(id)) }
        }
        self.perform(self.state.coordinatorLost(peer))
        self.lastBulkFlush[peer] = nil
    }

    /// The journal holds everything up to `seq`: send what waited for it.
    private func journalCommitted(_ seq: UInt64) {
        guard seq > self.committed else { return }
        self.committed = seq
        while let first = self.deferred.first, first.seq <= seq {
            self.deferred.removeFirst()
            if let job = first.coordinator.job {
                // A detached job's final result is on disk: keep it and pass it to its followers.
                if let id = first.result { self.jobResultCommitted(job, id, frames: first.frames) }
                continue
            }
            self.sendFrames(first.frames, to: first.coordinator, keepingResult: first.result)
        }
    }

    /// Sends encoded frames to a coordinator. A RESULT that cannot be delivered (its coordinator has
    /// not reconnected since a restart, or is gone) is kept for a while in case it asks again.
    private func sendFrames(_ frames: [[UInt8]], to coordinator: PeerID, keepingResult id: TaskID?) {
        guard case .running(let frontend, _, _) = self.lifecycle, coordinator.job == nil else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            // A RESULT kept if it cannot be delivered needs to know now; anything else is gathered.
            outcome =
                id == nil
                ? try self.frontOutbox.enqueue(frames, to: coordinator, on: frontend)
                : try self.frontOutbox.sendNow(frames, to: coordinator, on: frontend)
        } catch {
            self.logger.error(
                "send to coordinator failed",
                metadata: ["coordinator.id": "\(coordinator)", "error": "\(error)"]
            )
            return
        }
        if case .unreachable = outcome {
            if let id {
                self.storedResults[id] = StoredResult(
                    coordinator: coordinator,
                    frames: frames,
                    expires: .now + self.configuration.recoveryGrace
                )
            }
            // A coordinator known only from the journal has until its grace ends to come back.
            if self.state.coordinators[coordinator]?.awaitingReconnect != nil { return }
        }
        self.handle(outcome, peer: coordinator, front: true)
    }

    private func compactJournal() {
        guard let journal = self.journal else { return }
        var snapshot = self.state.snapshot()
        for (id, stored) in self.storedResults.sorted(by: { $0.key < $1.key }) {
            snapshot.append(.result(id, coordinator: stored.coordinator, frames: stored.frames))
        }
        for (job, record) in self.jobs.sorted(by: { $0.key < $1.key }) {
            for id in record.order {
                if let frames = record.results[id] {
                    snapshot.append(.result(id, coordinator: .job(job), frames: frames))
                }
            }
        }
        self.compactedBytes = snapshot.reduce(0) { $0 + $1.framed().count }
        journal.compact(snapshot)
    }

    private func maybeCompactJournal() {
        guard let journal = self.journal else { return }
        let size = journal.fileBytes
        guard size > self.configuration.compactionBytes, size > 2 * self.compactedBytes else { return }
        let before = size
        self.compactJournal()
        self.logger.info(
            "journal compacted",
            metadata: ["bytes.before": "\(before)", "bytes.after": "\(self.compactedBytes)"]
        )
    }

    private func sendToWorker(_ worker: PeerID, _ message: WireMessage) {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try self.backOutbox.enqueue(message, to: worker, on: backend)
        } catch {
            self.logger.error("send to worker failed", metadata: ["worker.id": "\(worker)", "error": "\(error)"])
            return
        }
        self.handle(outcome, peer: worker, front: false)
    }

    private func sendToCoordinator(_ coordinator: PeerID, _ message: WireMessage) {
        self.toCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            try outbox.enqueue(message, to: coordinator, on: frontend)
        }
    }

    /// Forwards a worker's RESULT or PROGRESS (frames after the routing id): gathered with the other
    /// messages for its coordinator when small, or sent on without copying its payload.
    private func forwardToCoordinator(_ coordinator: PeerID, _ message: inout Multipart) {
        guard case .running(let frontend, _, _) = self.lifecycle, coordinator.job == nil else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try self.frontOutbox.enqueue(&message, from: 1, to: coordinator, on: frontend)
        } catch {
            self.logger.error(
                "send to coordinator failed",
                metadata: ["coordinator.id": "\(coordinator)", "error": "\(error)"]
            )
            return
        }
        self.handle(outcome, peer: coordinator, front: true)
    }

    /// Gathers a message in packed form (a RESULT from a worker's BATCH) for its coordinator.
    private func forwardPacked(_ packed: UnsafeRawBufferPointer, to coordinator: PeerID) {
        self.toCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            try outbox.enqueue(packed: packed, to: coordinator, on: frontend)
        }
    }

    /// Puts something in a (connected) coordinator's outbox and handles the outcome.
    private func toCoordinator(
        _ coordinator: PeerID,
        _ put: (inout Outbox, Socket) throws(ZMQError) -> Outbox.Outcome
    ) {
        guard case .running(let frontend, _, _) = self.lifecycle, coordinator.job == nil else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try put(&self.frontOutbox, frontend)
        } catch {
            self.logger.error(
                "send to coordinator failed",
                metadata: ["coordinator.id": "\(coordinator)", "error": "\(error)"]
            )
            return
        }
        self.handle(outcome, peer: coordinator, front: true)
    }

    /// Sends a dispatched task's TASK, written straight into the worker's BATCH from the task table
    /// (no copy of the entry, no frames built); a large input goes as a message of its own.
    private func sendTask(_ id: TaskID, to worker: PeerID) {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        let result = self.state.tasks.withEntry(id) {
            entry -> (Result<Outbox.Outcome, ZMQError>, attempt: UInt32, deadline: ContinuousClock.Instant?) in
            let deadline =
                entry.envelope.timeoutMilliseconds > 0
                ? ContinuousClock.now + .milliseconds(entry.envelope.timeoutMilliseconds)
                    + self.configuration.heartbeat.expiry : nil
            let outcome = Result { () throws(ZMQError) -> Outbox.Outcome in
                if entry.input.count + 128 > Outbox.batchableBytes {
                    let frames = WireMessage.task(id, attempt: entry.attempt, entry.envelope, input: entry.input)
                        .encode()
                    return try self.backOutbox.enqueue(frames, to: worker, on: backend)
                }
                return try self.backOutbox.enqueue(to: worker, on: backend) { writer in
                    writer.appendTask(id, attempt: entry.attempt, entry.envelope, input: entry.input)
                }
            }
            return (outcome, entry.attempt, deadline)
        }
        guard let (outcome, attempt, deadline) = result else { return }
        if let deadline { self.leaseDeadlines[id] = (worker, attempt, deadline) }
        switch outcome {
        case .success(let outcome): self.handle(outcome, peer: worker, front: false)
        case .failure(let error):
            self.logger.error("send to worker failed", metadata: ["worker.id": "\(worker)", "error": "\(error)"])
        }
    }

    private func handle(_ outcome: Outbox.Outcome, peer: PeerID, front: Bool) {
        switch outcome {
        case .sent, .gathered: break
        case .parked: self.armFlush()
        case .unreachable: self.peerUnreachable(peer, front: front)
        }
    }

    private func peerUnreachable(_ peer: PeerID, front: Bool) {
        if front {
            guard peer.job == nil else { return }
            self.logger.info("coordinator unreachable", metadata: ["coordinator.id": "\(peer)"])
            self.frontOutbox.drop(peer)
            self.coordinatorLost(peer)
        } else {
            self.logger.info("worker unreachable", metadata: ["worker.id": "\(peer)"])
            self.backOutbox.drop(peer)
            self.perform(self.state.workerLost(peer, reason: "unreachable"))
        }
    }

    private func armFlush() {
        guard self.flushTimer == nil else { return }
        self.flushTimer = self.reactor.schedule(after: .milliseconds(1), every: .milliseconds(2)) { [weak self] in
            self?.assumeIsolated { $0.flushOutboxes() }
        }
    }

    /// Sends what this turn of the reactor gathered, one message or one BATCH per peer (the reactor
    /// calls it before it polls); a bulk coordinator's may wait (``holdForBulk(_:now:)``) unless `all`.
    /// `workersOnly` sends just what is gathered for workers (mid-turn, after a BATCH of SUBMITs).
    /// Losing a peer here may gather more (a requeued task's ACCEPTED), so it goes round again then.
    private func flushGathered(all: Bool = false, workersOnly: Bool = false) {
        guard case .running(let frontend, let backend, _) = self.lifecycle else { return }
        if workersOnly {
            guard self.backOutbox.hasPending else { return }
            do throws(ZMQError) {
                let back = try self.backOutbox.flushPending(on: backend)
                if back.parked { self.armFlush() }
                for peer in back.unreachable { self.peerUnreachable(peer, front: false) }
            } catch {
                self.logger.error("send failed", metadata: ["error": "\(error)"])
            }
            return
        }
        let now = ContinuousClock.now
        do throws(ZMQError) {
            for _ in 0..<4 {
                // Workers first: their TASKs are the credit cycle's critical path.
                let back = try self.backOutbox.flushPending(on: backend)
                let front = try self.frontOutbox.flushPending(on: frontend) { !all && self.holdForBulk($0, now: now) }
                if front.parked || back.parked { self.armFlush() }
                if front.unreachable.isEmpty && back.unreachable.isEmpty { break }
                for peer in front.unreachable { self.peerUnreachable(peer, front: true) }
                for peer in back.unreachable { self.peerUnreachable(peer, front: false) }
            }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// A coordinator with many tasks here gets what is gathered for it at most once per
    /// ``bulkGathering`` (its results come in bigger batches, and it is woken less often while the
    /// workers go on at full speed); one with few tasks, at once (a lone task's round trip is not
    /// delayed).
    private func holdForBulk(_ coordinator: PeerID, now: ContinuousClock.Instant) -> Bool {
        guard let entry = self.state.coordinators[coordinator], entry.taskCount >= Self.bulkTasks else { return false }
        if let last = self.lastBulkFlush[coordinator], now - last < Self.bulkGathering {
            if self.bulkTimer == nil {
                self.bulkTimer = self.reactor.schedule(after: last + Self.bulkGathering - now) { [weak self] in
                    // Only the wake-up is needed: the flush runs before the next poll.
                    self?.assumeIsolated { $0.bulkTimer = nil }
                }
            }
            return true
        }
        self.lastBulkFlush[coordinator] = now
        return false
    }

    private func flushOutboxes() {
        guard case .running(let frontend, let backend, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            for peer in try self.frontOutbox.flush(on: frontend) { self.peerUnreachable(peer, front: true) }
            for peer in try self.backOutbox.flush(on: backend) { self.peerUnreachable(peer, front: false) }
        } catch {
            self.logger.error("flush failed", metadata: ["error": "\(error)"])
        }
        if self.frontOutbox.isEmpty && self.backOutbox.isEmpty, let timer = self.flushTimer {
            self.reactor.cancel(timer)
            self.flushTimer = nil
        }
    }

    private func heartbeatTick() {
        let now = ContinuousClock.now
        if self.journal != nil {
            // Coordinators expiring in this tick: the journal forgets their tasks too.
            for (id, entry) in self.state.coordinators where !entry.detached {
                let expired =
                    entry.awaitingReconnect.map { now > $0 } ?? (now - entry.lastSeen > self.state.heartbeat.expiry)
                if expired { self.coordinatorLost(id) }
            }
            self.storedResults = self.storedResults.filter { $0.value.expires > now }
            self.expireJobs(now: now)
            self.maybeCompactJournal()
        }
        self.perform(self.state.tick(now: now))
        if !self.leaseDeadlines.isEmpty {
            let expired = self.leaseDeadlines.filter { $0.value.deadline <= now }
            for (id, lease) in expired.sorted(by: { $0.key < $1.key }) {
                self.leaseDeadlines[id] = nil
                let actions = self.state.expireLease(id, worker: lease.worker, attempt: lease.attempt)
                if !actions.isEmpty {
                    self.logger.warning(
                        "lease expired: no result by the task's deadline",
                        metadata: ["task.id": "\(id)", "worker.id": "\(lease.worker)", "attempt": "\(lease.attempt)"]
                    )
                }
                self.perform(actions)
            }
        }
        let beat = WireMessage.heartbeat(epoch: self.epoch)
        for worker in self.state.workers.keys { self.sendToWorker(worker, beat) }
        for coordinator in self.state.coordinators.keys where coordinator.job == nil {
            self.sendToCoordinator(coordinator, beat)
        }
    }

    /// The sender of a message on a ROUTER (its routing-id frame), or nil (counted and logged) when
    /// the message has no frame after it or too many frames. Recent senders are kept, so a message
    /// from one of them costs a comparison instead of a new copy of its id.
    private func routedPeer(_ message: borrowing Multipart, side: String) -> PeerID? {
        guard message.count >= 2, !message.overflowed else {
            self.rejectInput(ProtocolError(.badFrameCount, "\(message.count) frames"), from: nil, side: side)
            return nil
        }
        return message.withBytes(of: 0) { raw in
            for peer in self.recentPeers
            where peer.bytes.count == raw.count && peer.bytes.withUnsafeBytes({ $0.elementsEqual(raw) }) {
                return peer
            }
            let peer = PeerID(Array(raw))
            if self.recentPeers.count < Self.recentPeerCount {
                self.recentPeers.append(peer)
            } else {
                self.recentPeers[self.nextRecentPeer] = peer
                self.nextRecentPeer = (self.nextRecentPeer + 1) % Self.recentPeerCount
            }
            return peer
        }
    }

    /// Splits a ROUTER message into its sender and its decoded command. Bad input is counted and
    /// logged here; nil when there is not even a sender.
    private func decodeRouted(
        _ message: borrowing Multipart,
        side: String
    ) -> (PeerID, Result<WireMessage, ProtocolError>)? {
        guard let peer = self.routedPeer(message, side: side) else { return nil }
        do throws(ProtocolError) {
            return (peer, .success(try WireMessage.decode(message, from: 1)))
        } catch {
            self.rejectInput(error, from: peer, side: side)
            return (peer, .failure(error))
        }
    }

    private func rejectInput(_ error: ProtocolError, from peer: PeerID?, side: String) {
        self.badInput[error.code.description, default: 0] += 1
        self.badLog.log(
            self.logger,
            level: .warning,
            "bad input dropped",
            metadata: ["side": "\(side)", "peer": "\(peer.map(String.init(describing:)) ?? "?")", "reason": "\(error)"]
        )
    }
}
