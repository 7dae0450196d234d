import SkyNetCore
public import Logging
public import ZeroMQ

/// The submitting side: sends tasks to the broker, streams their results back, and re-runs failed
/// ones by its ``RetryPolicy`` (by default on its own local ``ScanSystem``, as in the book).
///
/// Exactly one ``FinalResult`` per task reaches the caller; later results for a finished task are
/// dropped and counted as duplicates. The connection lives on a ``Reactor`` (this actor's executor).
/// Use ``withCoordinator(configuration:reactor:logger:_:)``, which also runs the local ScanSystem's
/// retries and closes the connection afterwards:
///
/// ```swift
/// try await Coordinator.withCoordinator(configuration: .init(broker: "tcp://127.0.0.1:5555"),
///                                       reactor: reactor, logger: logger) { coordinator in
///     for try await batch in try await coordinator.submit(tasks) {
///         for case .final(let result) in batch { print(result.outputText) }
///     }
///     return await coordinator.summary
/// }
/// ```
public actor Coordinator {
    /// The reactor whose thread runs this coordinator and owns its connection.
    public nonisolated let reactor: Reactor
    /// The reactor, as this actor's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    /// The ScanSystem that runs local retries ("local").
    public nonisolated let localSystem: ScanSystem
    /// The routing id this coordinator presents to the broker.
    package nonisolated let id: PeerID
    let configuration: CoordinatorConfiguration
    let logger: Logger

    /// The broker endpoint this coordinator connects to (or the members of an HA group, separated by
    /// commas).
    public nonisolated var broker: String { self.configuration.broker }

    var connection: DealerConnection?
    /// The broker, or the members of its HA group, and which one this coordinator talks to.
    var brokers: BrokerList
    /// Since when no member of the group has led for this coordinator (it lost its leader, or was
    /// told "not the leader"); nil while one answers. Past the broker timeout the job's unfinished
    /// remote attempts go to the retry policy, as with a lone broker that went silent.
    #if DEBUG
    var leaderlessSince: ContinuousClock.Instant? { didSet { self.leaderless = self.leaderlessSince != nil } }
    /// Whether ``leaderlessSince`` is set, read for every message: an optional of the standard
    /// library's `ContinuousClock.Instant` (whose layout other modules do not know) was copied and
    /// destroyed through its type's metadata each time it was compared with nil (~300 instructions
    /// per RESULT).
    private(set) var leaderless = false
    #else
    // Release builds skip the dynamic exclusivity check of the properties marked so here (about ten
    // per task); debug builds (every test) keep it. Why each is safe: docs/DESIGN.md §3, "Unchecked
    // exclusivity", and the line below.
    // Unchecked: a plain value, read or replaced whole (as `switched`, `trace` and `job`).
    @exclusivity(unchecked) var leaderlessSince: ContinuousClock.Instant? {
        didSet { self.leaderless = self.leaderlessSince != nil }
    }
    @exclusivity(unchecked) private(set) var leaderless = false
    #endif
    /// The connection moved to another member: everything unfinished is sent again once it answers.
    #if DEBUG
    var switched = false
    #else
    @exclusivity(unchecked) var switched = false
    #endif
    var standbyLog = RateLimitedLog(perSecond: 1)
    /// Each task's SUBMIT, ACCEPTED and RESULTs, when asked for (``CoordinatorConfiguration/tracePath``).
    #if DEBUG
    var trace: TaskTrace?
    #else
    @exclusivity(unchecked) var trace: TaskTrace?
    #endif
    #if DEBUG
    var job: Job?
    #else
    @exclusivity(unchecked) var job: Job?
    #endif
    /// The system name of the last RESULT, for the next one from the same worker to take
    /// (``ResultView/system(of:previous:)``).
    #if DEBUG
    var lastSystem: String?
    #else
    // Unchecked: a plain value, read or replaced whole (as `switched`).
    @exclusivity(unchecked) var lastSystem: String?
    #endif
    var jobSerial = 0
    /// The last finished job's entry table, emptied, for the next job (``RetryLedger/takeEntryStorage()``):
    /// one task at a time, ``run(_:)`` allocated and freed one a round trip.
    var spareEntries: [RetryLedger.Entry] = []
    /// The last ``run(_:)`` job's one-task list, emptied, for the next (``RetryLedger/takeTaskStorage()``).
    var spareTasks: [ScanTask] = []
    var lastSummary = JobSummary()
    /// The results a cached job (``submit(_:cache:)``) delivered without running them (emptied as
    /// every job starts).
    #if DEBUG
    var cacheSummary = JobSummary()
    #else
    // Unchecked: a `JobSummary`, whose mutating methods touch only itself, replaced whole as every
    // job starts (its check, ~65 instructions, was one of two a `run(_:)` paid).
    @exclusivity(unchecked) var cacheSummary = JobSummary()
    #endif
    #if DEBUG
    var liveness: BrokerLiveness
    #else
    // Unchecked: `BrokerLiveness`'s methods touch only itself.
    @exclusivity(unchecked) var liveness: BrokerLiveness
    #endif
    /// Why the broker refused this coordinator, once it has: every job fails with it from then on.
    #if DEBUG
    public private(set) var refusal: CoordinatorError?
    #else
    // Unchecked: a plain value, read or replaced whole (read as every job starts).
    @exclusivity(unchecked) public private(set) var refusal: CoordinatorError?
    #endif
    var timers: [TimerID] = []
    /// Delivers ACCEPTED counts that have waited ``acceptedDelay`` alone.
    var acceptedFlush: TimerID?
    /// Retries waiting out their backoff, by task.
    var delayedRetries: [TaskID: TimerID] = [:]
    /// Callers of ``brokerStatus(timeout:)`` waiting for a reply, oldest first (replies come in order),
    /// each with its own number so that its timeout resumes it alone.
    var statusWaiters: [(number: UInt64, waiter: CheckedContinuation<String?, Never>)] = []
    var statusAsked: UInt64 = 0
    let localWork: AsyncStream<ScanTask>
    let localSink: AsyncStream<ScanTask>.Continuation

    /// A coordinator, not yet connected (``connect()``; ``withCoordinator(configuration:reactor:logger:scanners:_:)`` connects and closes it for you).
    /// - Parameters:
    ///   - configuration: the broker, the retry policy and the timeouts.
    ///   - reactor: the reactor that runs the coordinator and owns its connection.
    ///   - logger: where it logs.
    ///   - scanners: the task kinds the local ScanSystem re-runs failed tasks with (the workers' kinds).
    public init(
        configuration: CoordinatorConfiguration,
        reactor: Reactor,
        logger: Logger,
        scanners: [any TaskScanner]
    ) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        self.localSystem = ScanSystem(name: "local", slots: configuration.localSlots, scanners: scanners)
        self.id = PeerID.unique(prefix: "c")
        self.liveness = BrokerLiveness(timeout: configuration.brokerTimeout)
        self.brokers = BrokerList(configuration.broker)
        (self.localWork, self.localSink) = AsyncStream.makeStream(of: ScanTask.self)
    }

    /// Connects a coordinator, runs `body` with it while serving local retries, then closes it.
    public static func withCoordinator<R: Sendable>(
        configuration: CoordinatorConfiguration,
        reactor: Reactor,
        logger: Logger,
        scanners: [any TaskScanner],
        _ body: @Sendable (Coordinator) async throws -> R
    ) async throws -> R {
        let coordinator = Coordinator(
            configuration: configuration,
            reactor: reactor,
            logger: logger,
            scanners: scanners
        )
        try await coordinator.connect()
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await coordinator.runLocal() }
            do {
                let result = try await body(coordinator)
                await coordinator.close()
                // Local scans still running now are stale (their tasks already have final results).
                group.cancelAll()
                try await group.waitForAll()
                return result
            } catch {
                await coordinator.close()
                group.cancelAll()
                throw error
            }
        }
    }

    /// Connects to the broker (libzmq connects in the background; the first answer arrives later).
    public func connect() throws(CoordinatorError) {
        guard self.connection == nil else { return }
        if let path = self.configuration.tracePath, self.trace == nil { self.trace = try TaskTrace(path: path) }
        try self.open()
        // An observer only asks STATUS: no heartbeat, so the broker does not register it.
        guard !self.configuration.observer else { return }
        self.send(.heartbeat(epoch: 0))
        let interval = self.configuration.heartbeat.interval
        self.timers.append(
            self.reactor.schedule(after: interval, every: interval) { [weak self] in
                self?.assumeIsolated { $0.heartbeatTick() }
            }
        )
    }

    /// Serves local retries until ``close()``. ``withCoordinator(configuration:reactor:logger:scanners:_:)``
    /// runs it for you.
    public func runLocal() async {
        let system = self.localSystem
        await withDiscardingTaskGroup { group in
            for await task in self.localWork {
                group.addTask {
                    let result = await system.run(task)
                    await self.localFinished(result)
                }
            }
        }
    }

    /// Says goodbye to the broker and closes the connection; a running job fails. A connected
    /// coordinator stays alive (its reactor holds its socket handler) until this is called.
    public func close() {
        if let job = self.job {
            self.job = nil
            Self.end(job, throwing: CoordinatorError(.closed, "coordinator closed"))
        }
        for timer in self.timers { self.reactor.cancel(timer) }
        self.timers.removeAll()
        for timer in self.delayedRetries.values { self.reactor.cancel(timer) }
        self.delayedRetries.removeAll()
        if let timer = self.acceptedFlush { self.reactor.cancel(timer) }
        self.acceptedFlush = nil
        if let connection = self.connection {
            connection.send(.disconnect(.shutdown, text: "coordinator done"))
            connection.close(linger: .milliseconds(500))
            self.connection = nil
        }
        self.localSink.finish()
        self.endStatusWaits()
    }

    /// The totals of the current job, or of the last one when none is running.
    public var summary: JobSummary {
        guard let job = self.job else { return self.lastSummary.merging(self.cacheSummary) }
        var summary = job.ledger.summary
        summary.wall = ContinuousClock.now - job.start
        return summary.merging(self.cacheSummary)
    }

    /// Submits a job and returns its events, delivered in batches; the stream ends after the last
    /// task's final result.
    /// - Throws: ``CoordinatorError`` when a job is already running, the coordinator is closed, two
    ///   tasks share an id, or a task is too large for one message (``ScanTask/maxInputBytes``). The
    ///   stream itself fails with ``CoordinatorError/Code/brokerUnreachable`` when the broker does
    ///   not answer within the connect timeout.
    public func submit(
        _ tasks: [ScanTask]
    ) throws(CoordinatorError) -> AsyncThrowingStream<[CoordinatorEvent], any Error> {
        try self.submit(tasks, moreToCome: false)
    }

    /// Submits a job whose tasks come as they are made (lines read from a pipe, say): these first,
    /// more with ``add(_:)``, and ``endOfTasks()`` when there are no more. Tasks run as soon as
    /// they are added; the stream ends after the last task's final result once the job is closed.
    /// - Throws: as ``submit(_:)``.
    public func submit(
        _ tasks: [ScanTask],
        moreToCome: Bool
    ) throws(CoordinatorError) -> AsyncThrowingStream<[CoordinatorEvent], any Error> {
        try self.checkCanStart()
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [CoordinatorEvent].self)
        try self.start(tasks, delivery: .stream(Sink(continuation)), open: moreToCome)
        return stream
    }

    /// Adds tasks to the running job started with `moreToCome`; they are sent at once (within the
    /// submit window). Ignored once the job is cancelled.
    /// - Throws: ``CoordinatorError`` when no such job runs, an id is already in the job, or a task
    ///   is too large.
    public func add(_ tasks: [ScanTask]) throws(CoordinatorError) {
        guard let job = self.job, job.open, job.streams else {
            throw CoordinatorError(.closed, "no job of this coordinator takes more tasks (submit(_:moreToCome: true))")
        }
        guard !job.ledger.cancelling else { return }
        try CoordinatorError.checkSizes(tasks)
        for task in tasks { try self.add(task, to: job) }
        self.sendMore()
        self.connection?.flush()
    }

    /// Adds a task of a checked size to `job` (open, not cancelling), with the policy's max attempts.
    /// It is sent by the next ``sendMore()``.
    func add(_ task: consuming ScanTask, to job: Job) throws(CoordinatorError) {
        task.maxAttempts = self.configuration.retry.maxAttempts
        let id = task.id
        guard job.ledger.add(task) else { throw CoordinatorError(.duplicateTask, "task id \(id) appears twice") }
    }

    /// No more tasks for the running open job: it ends once every task has its final result.
    public func endOfTasks() {
        guard let job = self.job, job.open, job.streams else { return }
        job.open = false
        self.finishIfDone()
    }

    func checkCanStart() throws(CoordinatorError) {
        if let refusal = self.refusal { throw refusal }
        guard !self.configuration.observer else {
            throw CoordinatorError(.closed, "an observer coordinator (observer: true) submits no job")
        }
        guard self.connection != nil else { throw CoordinatorError(.closed, "coordinator is not connected") }
        guard self.job == nil else { throw CoordinatorError(.busy, "a job is already running on this coordinator") }
    }

    /// Starts a job (the caller has called ``checkCanStart()``, with no suspension since).
    func start(_ tasks: [ScanTask], delivery: consuming Delivery, open: Bool = false) throws(CoordinatorError) {
        var storage: [RetryLedger.Entry] = []
        swap(&storage, &self.spareEntries)
        var ledger = RetryLedger(
            policy: self.configuration.retry,
            outputs: self.configuration.outputs,
            entryStorage: consume storage
        )
        let maxAttempts = self.configuration.retry.maxAttempts
        // The tasks carry the policy's max attempts; the caller's array is shared (not copied) when
        // they already do, which matters for a job of a million tasks.
        let prepared =
            tasks.allSatisfy { $0.maxAttempts == maxAttempts }
            ? tasks
            : tasks.map { task in
                var task = task
                task.maxAttempts = maxAttempts
                return task
            }
        try CoordinatorError.checkSizes(prepared)
        if let duplicate = ledger.add(contentsOf: prepared) {
            throw CoordinatorError(.duplicateTask, "task id \(duplicate) appears twice")
        }
        self.jobSerial += 1
        self.cacheSummary = JobSummary()
        // Consumed: a copy left here would make the job's first change copy the ledger.
        self.job = Job(delivery: delivery, serial: self.jobSerial, start: .now, ledger: consume ledger)
        self.job?.open = open
        self.sendMore()
        if !self.liveness.answered {
            self.timers.append(
                self.reactor.schedule(after: self.configuration.connectTimeout) { [weak self] in
                    self?.assumeIsolated { $0.checkConnected() }
                }
            )
        }
        self.finishIfDone()
    }

    /// Cancels the running job: its queued tasks at the broker and its running ones on workers (by
    /// CANCEL), its local retries at once. Tasks that complete meanwhile are reported as completed;
    /// every other task ends as cancelled, at the latest after `grace`, and the job's stream then
    /// ends as usual (so the caller prints a partial summary).
    public func cancel(reason: String = "cancelled", grace: Duration = .seconds(3)) {
        guard let job = self.job, !job.ledger.cancelling else { return }
        job.open = false  // a cancelled job takes no more tasks, and ends with those it has
        let (remote, finals) = job.ledger.cancel(reason: reason)
        job.pending.append(.cancelling(reason: reason))
        for result in finals { job.deliver(result) }
        self.logger.info("cancelling job", metadata: ["reason": "\(reason)", "remote": "\(remote.count)"])
        for id in remote {
            let backoff = self.delayedRetries.removeValue(forKey: id)
            if let backoff { self.reactor.cancel(backoff) }
            guard backoff != nil || !job.ledger.isSent(id) else {
                self.send(.cancel(id))
                continue
            }
            // Waiting out its backoff, or never sent (the window had not reached it): the broker does
            // not hold it, so it ends here.
            let attempt = job.ledger.currentAttempt(id) ?? 1
            self.apply(
                job.ledger.record(id, attempt: attempt, outcome: .cancelled, system: "coordinator"),
                id: id,
                attempt: attempt,
                system: "coordinator",
                outcome: .cancelled
            )
        }
        for timer in self.delayedRetries.values { self.reactor.cancel(timer) }
        self.delayedRetries.removeAll()
        self.connection?.flush()
        self.timers.append(
            self.reactor.schedule(after: grace) { [weak self] in
                self?.assumeIsolated { coordinator in
                    guard let job = coordinator.job else { return }
                    let finals = job.ledger.cancelRemaining(reason: "\(reason) (no answer to CANCEL)")
                    for result in finals { job.deliver(result) }
                    coordinator.flushEvents()
                }
            }
        )
        self.flushEvents()
    }

    /// At most this many first SUBMITs are out unanswered; more go as answers come. It bounds what the
    /// coordinator holds encoded (a million tasks are not a million parked messages) and what arrives
    /// at the broker in one burst, and is far above what keeps workers busy.
    static let submitWindow = 8192

    /// Sends first SUBMITs while the window has room (and, once the broker pushed back, while there
    /// are credits: held tasks first).
    func sendMore() {
        // Most calls find nothing to send (a turn calls this after its results, whose handling may
        // have sent already): told before the job is taken (retained) and the rest.
        guard self.job?.maySend == true, let job = self.job else { return }
        guard !job.brokerLost else { return self.handOverUnsent(of: job) }
        if job.throttled {
            while job.credits > 0, job.heldHead < job.held.count {
                let id = job.held[job.heldHead]
                job.heldHead += 1
                guard job.ledger.markSent(id), let task = job.ledger.task(id) else { continue }
                job.credits -= 1
                self.send(.submit(task.id, attempt: task.attempt, task.envelope, input: task.input))
                self.trace?.record("submitted", task.id, broker: self.brokers.current)
            }
            if job.heldHead == job.held.count {
                job.held.removeAll(keepingCapacity: true)
                job.heldHead = 0
            }
            guard job.credits > 0 else { return }
        }
        // Before the connection and trace are taken (retained) for the loop.
        guard job.windowHasRoom else { return }
        let connection = self.connection
        let trace = self.trace
        let broker = trace == nil ? "" : self.brokers.current
        while job.windowHasRoom, !job.throttled || job.credits > 0 {
            let index = job.nextToSend
            job.nextToSend += 1
            // Not sent: a task that ended before it was (cancelled, or run locally after the broker was lost).
            let sent = job.ledger.send(at: index) { task in
                connection?.sendSubmit(task)
                trace?.record("submitted", task.pointee.id, broker: broker)
            }
            if sent && job.throttled { job.credits -= 1 }
        }
    }

    /// The broker refused this coordinator (its key, a failed handshake, the wrong port): the
    /// running job ends with the reason, and so does every later one, at once.
    func refused(_ reason: String) {
        guard self.refusal == nil else { return }
        let error = CoordinatorError(.refused, reason)
        self.refusal = error
        self.logger.info("the broker refused this coordinator", metadata: ["reason": "\(reason)"])
        if let job = self.job {
            self.job = nil
            Self.end(job, throwing: error)
        }
        self.endStatusWaits()
    }

    /// Asks the broker for a snapshot of its workers and queues.
    /// - Returns: nil when the broker does not answer within `timeout`.
    public func brokerStatus(timeout: Duration = .seconds(5)) async -> BrokerStatus? {
        guard self.connection != nil, self.refusal == nil else { return nil }
        self.send(.statusRequest)
        self.statusAsked += 1
        let number = self.statusAsked
        let timer = self.reactor.schedule(after: timeout) { [weak self] in
            self?.assumeIsolated { coordinator in
                // This caller's wait ends; the others' go on (each has its own timeout).
                guard let index = coordinator.statusWaiters.firstIndex(where: { $0.number == number }) else { return }
                coordinator.statusWaiters.remove(at: index).waiter.resume(returning: nil)
            }
        }
        let json = await withCheckedContinuation { self.statusWaiters.append((number, $0)) }
        self.reactor.cancel(timer)
        return json.flatMap { try? BrokerStatus.parse($0) }
    }

    /// A STATUS reply: it answers the oldest caller still waiting.
    func statusReplied(_ json: String) {
        guard !self.statusWaiters.isEmpty else { return }
        self.statusWaiters.removeFirst().waiter.resume(returning: json)
    }

    /// Ends every wait for a STATUS reply with nil (the coordinator closed, or was refused).
    func endStatusWaits() {
        let waiting = self.statusWaiters
        self.statusWaiters.removeAll()
        for (_, waiter) in waiting { waiter.resume(returning: nil) }
    }

    func send(_ message: WireMessage) {
        self.connection?.send(message)
    }
}
