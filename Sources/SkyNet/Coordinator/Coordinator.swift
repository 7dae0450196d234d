public import Logging
public import ZeroMQ

/// How a ``Coordinator`` connects and retries.
public struct CoordinatorConfiguration: Sendable {
    /// The broker's frontend endpoint, default `tcp://127.0.0.1:5555`.
    public var broker: String
    /// What happens to failed attempts (default: re-run locally, at most 3 attempts in all).
    public var retry: RetryPolicy
    /// Heartbeats to the broker (1 s, liveness 3).
    public var heartbeat: Heartbeat
    /// A job fails with ``CoordinatorError/Code/brokerUnreachable`` when the broker has not answered
    /// within this time of connecting (default 5 s).
    public var connectTimeout: Duration
    /// Broker silence after which unfinished remote attempts count as failed and go to the retry
    /// policy (default 15 s).
    public var brokerTimeout: Duration
    /// Slots of the local ScanSystem that runs local retries (default 4).
    public var localSlots: Int

    public init(
        broker: String = "tcp://127.0.0.1:5555",
        retry: RetryPolicy = .local(maxAttempts: 3),
        heartbeat: Heartbeat = Heartbeat(),
        connectTimeout: Duration = .seconds(5),
        brokerTimeout: Duration = .seconds(15),
        localSlots: Int = 4
    ) {
        self.broker = broker
        self.retry = retry
        self.heartbeat = heartbeat
        self.connectTimeout = connectTimeout
        self.brokerTimeout = brokerTimeout
        self.localSlots = localSlots
    }
}

/// An error a coordinator reports to its user.
public struct CoordinatorError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Hashable, Sendable {
        let name: String
        /// No answer from the broker within the connect timeout.
        public static let brokerUnreachable = Code(name: "broker unreachable")
        /// A job is already running on this coordinator.
        public static let busy = Code(name: "busy")
        /// The coordinator is closed.
        public static let closed = Code(name: "closed")
        /// Two tasks of a job share an id.
        public static let duplicateTask = Code(name: "duplicate task")
        /// The connection could not be set up.
        public static let connection = Code(name: "connection")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { self.message }

    /// The broker at `broker` did not answer within `timeout`.
    public static func unreachable(_ broker: String, within timeout: Duration) -> CoordinatorError {
        CoordinatorError(
            .brokerUnreachable,
            "no answer from the broker at \(broker) within \(DurationParser.format(timeout)); is `skynet broker` running there?"
        )
    }
}

extension DealerConnection {
    /// A client's (coordinator's or job client's) connection to a broker's frontend, with a failure
    /// as a ``CoordinatorError``.
    static func client(
        reactor: Reactor,
        broker: String,
        id: PeerID,
        logger: Logger,
        onReadable: @escaping () -> Void
    ) throws(CoordinatorError) -> DealerConnection {
        do throws(ZMQError) {
            return try DealerConnection(
                reactor: reactor,
                endpoint: broker,
                id: id,
                logger: logger,
                onReadable: onReadable
            )
        } catch {
            throw CoordinatorError(.connection, "cannot connect to \(broker): \(error.message)")
        }
    }
}

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
    public nonisolated let reactor: Reactor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    /// The ScanSystem that runs local retries ("local").
    public nonisolated let localSystem: ScanSystem
    /// The routing id this coordinator presents to the broker.
    public nonisolated let id: PeerID
    private let configuration: CoordinatorConfiguration
    private let logger: Logger

    /// The broker endpoint this coordinator connects to.
    public nonisolated var broker: String { self.configuration.broker }

    /// Where a job's events go.
    private enum Delivery {
        /// ``submit(_:)``: every event, in batches.
        case stream(AsyncThrowingStream<[CoordinatorEvent], any Error>.Continuation)
        /// ``run(_:)``: only the one final result, when the job ends.
        case single(CheckedContinuation<FinalResult, any Error>)
    }

    /// The running job, held in `job` and changed in place there. A class: as a struct it held a
    /// `ContinuousClock.Instant` and continuations, whose layout is not fixed outside the standard
    /// library, so every copy, test and destruction of it went through the runtime's value witnesses
    /// (in the profile, about a tenth of a coordinator's reactor when tasks go one at a time).
    private final class Job {
        let delivery: Delivery
        /// Tells this job from the next (a late cancellation of a ``run(_:)`` must not hit another).
        let serial: Int
        let start: ContinuousClock.Instant
        var ledger: RetryLedger
        /// The first of `ledger.tasks` (in submission order) whose first SUBMIT has not gone out.
        var nextToSend = 0
        var pending: [CoordinatorEvent] = []
        var accepted = 0
        var brokerLost = false
        /// A ``run(_:)`` job's final result, kept until the job ends.
        var final: FinalResult?

        init(delivery: Delivery, serial: Int, start: ContinuousClock.Instant, ledger: consuming RetryLedger) {
            self.delivery = delivery
            self.serial = serial
            self.start = start
            self.ledger = ledger
        }
    }

    private var connection: DealerConnection?
    private var job: Job?
    private var jobSerial = 0
    private var lastSummary = JobSummary()
    private var heardFromBroker = false
    /// The broker's epoch from its HEARTBEAT; a new value means it restarted and lost what it held
    /// in memory.
    private var brokerEpoch: UInt32?
    private var lastHeard = ContinuousClock.now
    private var timers: [TimerID] = []
    /// Delivers ACCEPTED counts that have waited ``acceptedDelay`` alone.
    private var acceptedFlush: TimerID?
    /// Retries waiting out their backoff, by task.
    private var delayedRetries: [TaskID: TimerID] = [:]
    private var statusWaiters: [CheckedContinuation<String?, Never>] = []
    private let localWork: AsyncStream<ScanTask>
    private let localSink: AsyncStream<ScanTask>.Continuation

    public init(
        configuration: CoordinatorConfiguration,
        reactor: Reactor,
        logger: Logger,
        scanners: [any Scanner] = [SectorScanner()]
    ) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        self.localSystem = ScanSystem(name: "local", slots: configuration.localSlots, scanners: scanners)
        self.id = PeerID.unique(prefix: "c")
        (self.localWork, self.localSink) = AsyncStream.makeStream(of: ScanTask.self)
    }

    /// Connects a coordinator, runs `body` with it while serving local retries, then closes it.
    public static func withCoordinator<R: Sendable>(
        configuration: CoordinatorConfiguration,
        reactor: Reactor,
        logger: Logger,
        scanners: [any Scanner] = [SectorScanner()],
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
        self.connection = try DealerConnection.client(
            reactor: self.reactor,
            broker: self.configuration.broker,
            id: self.id,
            logger: self.logger
        ) { self.drain() }  // isolated to this actor: see Broker.start()
        self.lastHeard = .now
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
        for waiter in self.statusWaiters { waiter.resume(returning: nil) }
        self.statusWaiters.removeAll()
    }

    /// The totals of the current job, or of the last one when none is running.
    public var summary: JobSummary {
        guard let job = self.job else { return self.lastSummary }
        var summary = job.ledger.summary
        summary.wall = ContinuousClock.now - job.start
        return summary
    }

    /// Submits a job and returns its events, delivered in batches; the stream ends after the last
    /// task's final result.
    /// - Throws: ``CoordinatorError`` when a job is already running, the coordinator is closed, or two
    ///   tasks share an id. The stream itself fails with ``CoordinatorError/Code/brokerUnreachable``
    ///   when the broker does not answer within the connect timeout.
    public func submit(
        _ tasks: [ScanTask]
    ) throws(CoordinatorError) -> AsyncThrowingStream<[CoordinatorEvent], any Error> {
        try self.checkCanStart()
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [CoordinatorEvent].self)
        try self.start(tasks, delivery: .stream(continuation))
        return stream
    }

    /// Runs one task as a job of its own and returns its final result: a submit-and-wait without
    /// the event stream, for a caller that only wants the answer (the retry policy applies as for any
    /// job; its intermediate events are not reported). Cancelling the calling task cancels the job,
    /// and the result then says cancelled.
    /// - Throws: ``CoordinatorError`` as ``submit(_:)`` does, also when the broker is unreachable.
    public func run(_ task: ScanTask) async throws -> FinalResult {
        try self.checkCanStart()
        let serial = self.jobSerial + 1
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                do throws(CoordinatorError) {
                    try self.start([task], delivery: .single(continuation))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            Task { await self.cancel(serial: serial) }
        }
    }

    private func cancel(serial: Int) {
        guard self.job?.serial == serial else { return }
        self.cancel(reason: "cancelled")
    }

    private func checkCanStart() throws(CoordinatorError) {
        guard self.connection != nil else { throw CoordinatorError(.closed, "coordinator is not connected") }
        guard self.job == nil else { throw CoordinatorError(.busy, "a job is already running on this coordinator") }
    }

    /// Starts a job (the caller has called ``checkCanStart()``, with no suspension since).
    private func start(_ tasks: [ScanTask], delivery: Delivery) throws(CoordinatorError) {
        var ledger = RetryLedger(policy: self.configuration.retry)
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
        if let duplicate = ledger.add(contentsOf: prepared) {
            throw CoordinatorError(.duplicateTask, "task id \(duplicate) appears twice")
        }
        self.jobSerial += 1
        // Consumed: a copy left here would make the job's first change copy the ledger.
        self.job = Job(delivery: delivery, serial: self.jobSerial, start: .now, ledger: consume ledger)
        self.sendMore()
        if !self.heardFromBroker {
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
        guard self.job != nil, !self.job!.ledger.cancelling else { return }
        let (remote, finals) = self.job!.ledger.cancel(reason: reason)
        self.job!.pending.append(.cancelling(reason: reason))
        self.job!.pending.append(contentsOf: finals.map(CoordinatorEvent.final))
        self.logger.info("cancelling job", metadata: ["reason": "\(reason)", "remote": "\(remote.count)"])
        for id in remote {
            let backoff = self.delayedRetries.removeValue(forKey: id)
            if let backoff { self.reactor.cancel(backoff) }
            guard backoff != nil || !(self.job?.ledger.isSent(id) ?? true) else {
                self.send(.cancel(id))
                continue
            }
            // Waiting out its backoff, or never sent (the window had not reached it): the broker does
            // not hold it, so it ends here.
            let attempt = self.job?.ledger.currentAttempt(id) ?? 1
            self.apply(
                self.job?.ledger.record(id, attempt: attempt, outcome: .cancelled, system: "coordinator"),
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
                    guard coordinator.job != nil else { return }
                    let finals = coordinator.job!.ledger.cancelRemaining(reason: "\(reason) (no answer to CANCEL)")
                    coordinator.job!.pending.append(contentsOf: finals.map(CoordinatorEvent.final))
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

    /// Sends first SUBMITs while the window has room.
    private func sendMore() {
        guard self.job != nil else { return }
        while self.job!.ledger.unanswered < Self.submitWindow, self.job!.nextToSend < self.job!.ledger.tasks.count {
            let task = self.job!.ledger.tasks[self.job!.nextToSend]
            self.job!.nextToSend += 1
            // A task that ended before it was sent (cancelled, or run locally after the broker was lost).
            guard self.job!.ledger.markSent(task.id) else { continue }
            self.send(.submit(task.id, attempt: task.attempt, task.envelope, input: task.input))
        }
    }

    /// Asks the broker for a snapshot of its workers and queues.
    /// - Returns: nil when the broker does not answer within `timeout`.
    public func brokerStatus(timeout: Duration = .seconds(5)) async -> BrokerStatus? {
        guard self.connection != nil else { return nil }
        self.send(.statusRequest)
        let timer = self.reactor.schedule(after: timeout) { [weak self] in
            self?.assumeIsolated { coordinator in
                for waiter in coordinator.statusWaiters { waiter.resume(returning: nil) }
                coordinator.statusWaiters.removeAll()
            }
        }
        let json = await withCheckedContinuation { self.statusWaiters.append($0) }
        self.reactor.cancel(timer)
        return json.flatMap { try? BrokerStatus.parse($0) }
    }

    // MARK: Receiving

    private func drain() {
        guard let connection = self.connection else { return }
        connection.receiveMessages { message in
            self.heardFromBroker = true
            self.lastHeard = .now
            self.handle(message)
        }
        self.sendMore()
        self.flushEvents()
        self.connection?.flush()
    }

    private func handle(_ message: WireMessage) {
        switch message {
        case .accepted(let id, let attempt, let requeued):
            guard self.job != nil else { return }
            if requeued {
                if self.job!.ledger.requeued(id, attempt: attempt), let task = self.job!.ledger.task(id) {
                    self.job!.pending.append(.requeued(task, attempt: attempt))
                }
            } else if self.job!.ledger.accepted(id) {
                self.job!.accepted += 1
            }
        case .rejected(let id, let reason, let text):
            self.apply(self.job?.ledger.fail(id, reason: "rejected by broker: \(reason) (\(text))", system: "broker"))
        case .result(let id, let attempt, let status, let meta, let body):
            // The broker sends no ACCEPTED for a task whose RESULT comes first: the RESULT says it.
            if self.job?.ledger.accepted(id) == true { self.job!.accepted += 1 }
            let outcome = ScanOutcome(status: status, body: body)
            let remoteAllowed = !(self.job?.brokerLost ?? false)
            self.apply(
                self.job?.ledger.record(
                    id,
                    attempt: attempt,
                    outcome: outcome,
                    system: meta.system,
                    remoteAllowed: remoteAllowed
                ),
                id: id,
                attempt: attempt,
                system: meta.system,
                outcome: outcome
            )
        case .heartbeat(let epoch):
            guard epoch != 0 else { break }
            if let known = self.brokerEpoch, known != epoch { self.brokerRestarted() }
            self.brokerEpoch = epoch
        case .statusReply(let json):
            if !self.statusWaiters.isEmpty { self.statusWaiters.removeFirst().resume(returning: json) }
        case .disconnect(.unknownPeer, let text):
            // The broker forgot us (we were silent too long): it dropped our tasks, so send them again.
            self.logger.warning("broker forgot this coordinator", metadata: ["reason": "\(text)"])
            self.resendUnfinished(reason: "the broker had forgotten this coordinator")
        case .disconnect(let reason, let text):
            self.logger.warning("broker said disconnect", metadata: ["reason": "\(reason): \(text)"])
            if reason == .shutdown { self.brokerLost("broker stopped: \(text)") }
        case .progress:
            break
        default:
            self.logger.warning("unexpected \(message.commandName) from broker dropped")
        }
    }

    /// Carries out a ledger decision and records the events the user sees.
    private func apply(
        _ decision: RetryLedger.Decision?,
        id: TaskID? = nil,
        attempt: UInt32 = 0,
        system: String = "",
        outcome: ScanOutcome? = nil
    ) {
        guard let decision, self.job != nil else { return }
        func reason() -> String {
            switch outcome {
            case .failed(let text): text
            case .timedOut: "timed out"
            case .cancelled: "cancelled"
            case .completed, .none: ""
            }
        }
        switch decision {
        case .final(let result):
            if case .single = self.job!.delivery {
                // A run(_:) job keeps only its final result.
                self.job!.final = result
            } else {
                self.job!.pending.append(.final(result))
            }
        case .retryLocal(let task), .retryRemote(let task):
            let placement: RetryPolicy.Placement
            if case .retryLocal = decision { placement = .local } else { placement = .remote }
            let delay = self.configuration.retry.backoff.delay(before: task.attempt)
            self.job!.pending.append(
                .retrying(
                    task,
                    failedAttempt: attempt,
                    system: system,
                    reason: reason(),
                    placement: placement,
                    delay: delay
                )
            )
            if delay <= .zero {
                self.startRetry(task, placement: placement)
            } else {
                if let old = self.delayedRetries[task.id] { self.reactor.cancel(old) }
                self.delayedRetries[task.id] = self.reactor.schedule(after: delay) { [weak self] in
                    self?.assumeIsolated { coordinator in
                        coordinator.delayedRetries[task.id] = nil
                        guard let job = coordinator.job, job.ledger.isCurrent(task.id, attempt: task.attempt) else {
                            return
                        }
                        coordinator.startRetry(task, placement: placement)
                        coordinator.connection?.flush()
                    }
                }
            }
        case .duplicate:
            self.logger.debug(
                "duplicate result dropped",
                metadata: ["task.id": "\(id.map(String.init(describing:)) ?? "?")"]
            )
        case .stale:
            break
        }
        self.finishIfDone()
    }

    private func startRetry(_ task: ScanTask, placement: RetryPolicy.Placement) {
        if placement == .local {
            self.localSink.yield(task)
        } else {
            self.send(.submit(task.id, attempt: task.attempt, task.envelope, input: task.input))
        }
    }

    private func localFinished(_ result: ScanResult) {
        let remoteAllowed = !(self.job?.brokerLost ?? false)
        self.apply(
            self.job?.ledger.record(
                result.id,
                attempt: result.attempt,
                outcome: result.outcome,
                system: result.system,
                remoteAllowed: remoteAllowed
            ),
            id: result.id,
            attempt: result.attempt,
            system: result.system,
            outcome: result.outcome
        )
        self.flushEvents()
    }

    private func flushEvents() {
        guard let job = self.job else { return }
        if job.pending.isEmpty, job.accepted > 0 {
            // Only ACCEPTED counts: they wait a little for a result to ride along with, so that a
            // submit-and-wait caller is woken once per task instead of twice.
            if self.acceptedFlush == nil {
                self.acceptedFlush = self.reactor.schedule(after: Self.acceptedDelay) { [weak self] in
                    self?.assumeIsolated { coordinator in
                        coordinator.acceptedFlush = nil
                        coordinator.flushAccepted()
                    }
                }
            }
            return
        }
        if let timer = self.acceptedFlush {
            self.reactor.cancel(timer)
            self.acceptedFlush = nil
        }
        self.flushAccepted()
    }

    /// How long ACCEPTED counts alone may wait for other events before they are delivered.
    static let acceptedDelay = Duration.milliseconds(5)

    private func flushAccepted() {
        guard self.job != nil else { return }
        if self.job!.accepted > 0 {
            self.job!.pending.insert(.accepted(count: self.job!.accepted), at: 0)
            self.job!.accepted = 0
        }
        guard !self.job!.pending.isEmpty else { return }
        let events = self.job!.pending
        self.job!.pending = []
        self.deliver(events)
        self.finishIfDone()
    }

    private func finishIfDone() {
        guard let current = self.job, current.ledger.outstanding == 0 else { return }
        var summary = current.ledger.summary
        summary.wall = ContinuousClock.now - current.start
        self.lastSummary = summary
        var events = current.pending
        if current.accepted > 0, case .stream = current.delivery {
            events.insert(.accepted(count: current.accepted), at: 0)
        }
        if !events.isEmpty { self.deliver(events) }
        self.job = nil
        Self.end(current, throwing: nil)
    }

    /// Hands a batch of events to the job's caller (a ``run(_:)`` job keeps only its final result).
    private func deliver(_ events: [CoordinatorEvent]) {
        switch self.job?.delivery {
        case .stream(let continuation): continuation.yield(events)
        case .single:
            for case .final(let result) in events { self.job!.final = result }
        case nil: break
        }
    }

    /// Ends a job that is no longer `self.job`: its stream finishes, or its ``run(_:)`` returns.
    private static func end(_ job: Job, throwing error: (any Error)?) {
        switch job.delivery {
        case .stream(let continuation):
            if let error { continuation.finish(throwing: error) } else { continuation.finish() }
        case .single(let continuation):
            if let error {
                continuation.resume(throwing: error)
            } else if let final = job.final {
                continuation.resume(returning: final)
            } else {
                continuation.resume(throwing: CoordinatorError(.closed, "the job ended without a final result"))
            }
        }
    }

    // MARK: Broker liveness

    private func checkConnected() {
        guard !self.heardFromBroker, let job = self.job else { return }
        self.job = nil
        Self.end(
            job,
            throwing: CoordinatorError.unreachable(self.configuration.broker, within: self.configuration.connectTimeout)
        )
    }

    private func heartbeatTick() {
        self.send(.heartbeat(epoch: 0))
        if self.heardFromBroker, ContinuousClock.now - self.lastHeard > self.configuration.brokerTimeout {
            self.brokerLost("no word from the broker for \(DurationParser.format(self.configuration.brokerTimeout))")
        }
    }

    /// The broker is gone: unfinished remote attempts count as failed, so the retry policy decides
    /// (locally re-run by default) and the job cannot hang.
    private func brokerLost(_ reason: String) {
        guard let job = self.job, !job.brokerLost else { return }
        job.brokerLost = true
        job.pending.append(.brokerLost(reason: reason))
        self.logger.warning("broker lost", metadata: ["reason": "\(reason)"])
        for (id, attempt) in job.ledger.unfinishedRemote {
            let outcome = ScanOutcome.failed("broker lost: \(reason)")
            self.apply(
                self.job?.ledger.record(id, attempt: attempt, outcome: outcome, system: "broker", remoteAllowed: false),
                id: id,
                attempt: attempt,
                system: "broker",
                outcome: outcome
            )
        }
        self.flushEvents()
    }

    /// The broker came back as a new process: whatever it held in memory is gone (a durable broker
    /// recovers its journal, and answers a resend of a task it has with ACCEPTED again). Send every
    /// unfinished remote task again, at its current attempt; remote retries are allowed again.
    private func brokerRestarted() {
        self.resendUnfinished(reason: "the broker restarted")
    }

    private func resendUnfinished(reason: String) {
        guard let job = self.job, !job.ledger.cancelling else { return }
        // A retry still waiting out its backoff goes when its timer fires, not now.
        let tasks = job.ledger.unfinishedRemoteTasks.filter { self.delayedRetries[$0.id] == nil }
        job.brokerLost = false
        job.pending.append(.resubmitted(count: tasks.count, reason: reason))
        self.logger.warning("resending unfinished tasks", metadata: ["tasks": "\(tasks.count)", "reason": "\(reason)"])
        for task in tasks {
            self.send(.submit(task.id, attempt: task.attempt, task.envelope, input: task.input))
        }
    }

    // MARK: Sending

    private func send(_ message: WireMessage) {
        self.connection?.send(message)
    }
}
