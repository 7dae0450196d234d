import SkyNetCore
public import Logging
public import ZeroMQ

/// What `skynet results` sees of a detached job.
public enum DetachedJobEvent: Sendable, Equatable {
    /// A task's final result.
    case result(FinalResult)
    /// The broker's account of the job (after the results it had; again when a followed job is done).
    case status(DetachedJobStatus)
}

/// The client side of detached jobs (a durable broker keeps them, DESIGN.md §8): submits a job's
/// tasks and returns once every one is accepted (on disk), reads a job's results now or later, and
/// cancels a job. One request at a time; the connection lives on a ``Reactor`` like a
/// ``Coordinator``'s.
public actor DetachedJobClient {
    /// The reactor whose thread runs this client and owns its connection.
    public nonisolated let reactor: Reactor
    /// The reactor, as this actor's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }
    package nonisolated let id: PeerID

    private let broker: String
    private let connectTimeout: Duration
    private let heartbeat: Heartbeat
    private let security: ClientSecurity?
    private let logger: Logger
    private var connection: DealerConnection?
    /// The broker, or the members of its HA group, and which one this client talks to.
    private var brokers: BrokerList
    /// Since when no member of the group has led for this client (nil while one answers).
    private var leaderlessSince: ContinuousClock.Instant?
    private var switched = false
    private let brokerTimeout: Duration
    private var liveness: BrokerLiveness
    private var timers: [TimerID] = []

    private struct Submission {
        let job: TaskID
        var unaccepted: [TaskID: ScanTask]
        var accepted = 0
        /// Sent once the broker holds the job (after its first ACCEPTED).
        var name: String?
        let continuation: CheckedContinuation<Void, any Error>
    }
    private var submission: Submission?

    /// How many tasks of the running submission the broker has accepted so far (journaled: they run
    /// whatever happens to this process).
    public var acceptedSoFar: Int { self.submission?.accepted ?? self.lastAccepted }
    private var lastAccepted = 0

    private struct Query {
        let job: TaskID
        let follow: Bool
        let continuation: AsyncThrowingStream<DetachedJobEvent, any Error>.Continuation
        var seen: Set<TaskID> = []
    }
    private var query: Query?
    private var cancelWaiter: (job: TaskID, continuation: CheckedContinuation<DetachedJobStatus, any Error>)?

    /// A client of the durable broker at `broker`'s frontend, not yet connected (``connect()``).
    /// - Parameters:
    ///   - broker: the broker's frontend endpoint.
    ///   - reactor: the reactor that runs the client.
    ///   - logger: where it logs.
    ///   - heartbeat: heartbeats to the broker (1 s).
    ///   - connectTimeout: requests fail when the broker has not answered within this (5 s).
    ///   - brokerTimeout: requests fail after this much silence from a broker that had answered (15 s).
    ///   - security: CURVE keys (nil: plain text).
    public init(
        broker: String,
        reactor: Reactor,
        logger: Logger,
        heartbeat: Heartbeat = Heartbeat(),
        connectTimeout: Duration = .seconds(5),
        brokerTimeout: Duration = .seconds(15),
        security: ClientSecurity? = nil
    ) {
        self.security = security
        self.broker = broker
        self.reactor = reactor
        self.logger = logger
        self.heartbeat = heartbeat
        self.connectTimeout = connectTimeout
        self.id = PeerID.unique(prefix: "j")
        self.liveness = BrokerLiveness(timeout: brokerTimeout)
        self.brokers = BrokerList(broker)
        self.brokerTimeout = brokerTimeout
    }

    /// Connects (libzmq connects in the background; requests fail if the broker does not answer
    /// within the connect timeout).
    public func connect() throws(CoordinatorError) {
        guard self.connection == nil else { return }
        try self.open()
        let interval = self.heartbeat.interval
        self.timers.append(
            self.reactor.schedule(after: interval, every: interval) { [weak self] in
                self?.assumeIsolated { $0.heartbeatTick() }
            }
        )
        self.timers.append(
            self.reactor.schedule(after: self.connectTimeout) { [weak self] in
                self?.assumeIsolated { client in
                    guard !client.liveness.answered, client.leaderlessSince == nil else { return }
                    client.failAll(CoordinatorError.unreachable(client.broker, within: client.connectTimeout))
                }
            }
        )
    }

    /// Connects to the member of ``brokers`` in use.
    private func open() throws(CoordinatorError) {
        self.connection = try DealerConnection.client(
            reactor: self.reactor,
            broker: self.brokers.current,
            id: self.id,
            security: self.security,
            logger: self.logger,
            onReadable: { self.drain() },  // isolated to this actor: see Broker.start()
            onFailure: { self.failAll(CoordinatorError(.refused, $0.message)) }
        )
        self.liveness.connected(now: .now)
        self.connection?.send(.heartbeat(epoch: 0))
    }

    /// Moves to another member of the group (`next`, or the one after a silent one).
    private func switchBroker(to next: String?, because reason: String) {
        self.leaderlessSince = self.leaderlessSince ?? .now
        let from = self.brokers.current
        let target = next ?? self.brokers.silent(now: .now)
        self.logger.notice("the broker at \(from) \(reason); switching to \(target)")
        self.connection?.close()
        self.connection = nil
        self.switched = true
        do throws(CoordinatorError) {
            try self.open()
        } catch {
            self.failAll(error)
        }
    }

    /// Says goodbye and closes the connection; a request still waiting fails. A connected client
    /// stays alive (its reactor holds its socket handler) until this is called.
    public func close() {
        self.failAll(CoordinatorError(.closed, "connection closed"))
        for timer in self.timers { self.reactor.cancel(timer) }
        self.timers.removeAll()
        if let connection = self.connection {
            connection.send(.disconnect(.shutdown, text: "job client done"))
            connection.close(linger: .milliseconds(500))
            self.connection = nil
        }
    }

    /// Submits `tasks` as detached job `job` and returns once the broker has accepted (journaled)
    /// every one of them. The broker shows the job as `name` (at most 128 bytes), if given.
    /// - Throws: ``CoordinatorError`` when the broker is unreachable or refuses a task (for example
    ///   because it has no journal).
    public func submit(_ tasks: [ScanTask], job: TaskID, name: String? = nil) async throws {
        guard self.connection != nil else { throw CoordinatorError(.closed, "not connected") }
        guard self.submission == nil else { throw CoordinatorError(.busy, "a submission is already running") }
        var unaccepted: [TaskID: ScanTask] = [:]
        for task in tasks {
            guard unaccepted.updateValue(task, forKey: task.id) == nil else {
                throw CoordinatorError(.duplicateTask, "task id \(task.id) appears twice")
            }
        }
        try CoordinatorError.checkSizes(tasks)
        self.lastAccepted = 0
        guard !unaccepted.isEmpty else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            self.submission = Submission(
                job: job,
                unaccepted: unaccepted,
                name: name.map { String($0.prefix(utf8Bytes: ProtocolLimits.nameLength)) }.flatMap {
                    $0.isEmpty ? nil : $0
                },
                continuation: continuation
            )
            for task in tasks { self.sendSubmit(task, job: job) }
            self.connection?.flush()
        }
    }

    /// The job's results the broker holds, then its status; with `follow`, also the results still to
    /// come, ending when the job is done.
    public func results(job: TaskID, follow: Bool) -> AsyncThrowingStream<DetachedJobEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: DetachedJobEvent.self)
        guard self.connection != nil, self.query == nil else {
            continuation.finish(throwing: CoordinatorError(.busy, "not connected, or a query is already running"))
            return stream
        }
        self.query = Query(job: job, follow: follow, continuation: continuation)
        self.connection?.send(.jobQuery(job: job, follow: follow))
        return stream
    }

    /// Cancels the job's unfinished tasks; returns the broker's account of the job.
    public func cancel(job: TaskID) async throws -> DetachedJobStatus {
        guard self.connection != nil, self.cancelWaiter == nil else {
            throw CoordinatorError(.busy, "not connected, or a cancel is already running")
        }
        return try await withCheckedThrowingContinuation { continuation in
            self.cancelWaiter = (job, continuation)
            self.connection?.send(.jobCancel(job: job))
        }
    }

    // MARK: Receiving

    private func drain() {
        guard let connection = self.connection else { return }
        connection.receiveMessages { message in self.handle(message) }
        self.connection?.flush()
    }

    private func handle(_ message: WireMessage) {
        switch self.liveness.hear(message, now: .now) {
        case .answered(let restarted)? where restarted || self.switched:
            (self.switched, self.leaderlessSince) = (false, nil)
            self.brokerRestarted()
            return
        case .restarted?, .forgotten?:
            self.leaderlessSince = nil
            self.brokerRestarted()
            return
        case .notLeader(let hint)?:
            self.leaderlessSince = self.leaderlessSince ?? .now
            self.switched = true
            let from = self.brokers.current
            if let next = self.brokers.notLeader(hint: hint, now: .now) {
                self.switchBroker(to: next, because: "does not lead")
            } else if !self.brokers.isGroup {
                self.failAll(
                    CoordinatorError(
                        .connection,
                        "the broker at \(from) is a standby of an HA group\(hint.isEmpty ? "" : " (the leader is \(hint))"): give every member (--broker tcp://a:5555,tcp://b:5555)"
                    )
                )
            }
            return
        case .refused(let text)?:
            self.failAll(CoordinatorError(.refused, text))
            return
        case .leaving(let reason, let text)?:
            if reason == .shutdown {
                if self.brokers.isGroup {
                    self.switchBroker(to: nil, because: "stopped")
                } else {
                    self.failAll(CoordinatorError(.connection, "the broker stopped: \(text)"))
                }
            }
            return
        case .answered?:
            self.leaderlessSince = nil
        case nil:
            if !message.isStatusReply { self.leaderlessSince = nil }
        }
        switch message {
        case .accepted(let id, _, _):
            // In place: a copy of the submission would copy its table with every ACCEPTED (quadratic).
            guard self.submission?.unaccepted.removeValue(forKey: id) != nil else { return }
            self.submission?.accepted += 1
            if let submission = self.submission, submission.accepted == 1, let name = submission.name {
                self.connection?.send(.jobName(job: submission.job, name: name))
            }
            if let submission = self.submission, submission.unaccepted.isEmpty {
                self.lastAccepted = submission.accepted
                self.submission = nil
                submission.continuation.resume()
            }
        case .rejected(let id, _, let text):
            guard let submission = self.submission, submission.unaccepted[id] != nil else { return }
            self.lastAccepted = submission.accepted
            self.submission = nil
            submission.continuation.resume(
                throwing: CoordinatorError(.connection, "the broker refused task \(id): \(text)")
            )
        case .jobResult(let job, let id, let attempt, let status, let meta, let body, let kind, let input):
            guard self.query?.job == job, let query = self.query, self.query?.seen.insert(id).inserted == true else {
                return
            }
            let task = ScanTask(id: id, attempt: attempt, envelope: TaskEnvelope(kind: kind), input: input)
            query.continuation.yield(.result(Self.finalResult(task, status, meta, body)))
        case .jobReply(let job, let json):
            let status: DetachedJobStatus
            do {
                status = try DetachedJobStatus.parse(json)
            } catch {
                self.logger.warning("bad JOB reply dropped", metadata: ["error": "\(error)"])
                return
            }
            if let waiter = self.cancelWaiter, waiter.job == job {
                self.cancelWaiter = nil
                if let error = status.error {
                    waiter.continuation.resume(throwing: CoordinatorError(.connection, error))
                } else {
                    waiter.continuation.resume(returning: status)
                }
            }
            if let query = self.query, query.job == job {
                if let error = status.error {
                    self.query = nil
                    query.continuation.finish(throwing: CoordinatorError(.connection, error))
                    return
                }
                query.continuation.yield(.status(status))
                if !query.follow || status.done {
                    self.query = nil
                    query.continuation.finish()
                }
            }
        default:
            break
        }
    }

    static func finalResult(
        _ task: ScanTask,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        _ body: [UInt8]
    )
        -> FinalResult
    {
        let attempts = Int(task.attempt)
        switch ScanOutcome(status: status, body: body) {
        case .completed(let output):
            return FinalResult(task: task, status: .completed, attempts: attempts, system: meta.system, output: output)
        case .failed(let text, let detail):
            return FinalResult(
                task: task,
                status: .failed,
                attempts: attempts,
                system: meta.system,
                error: text,
                errorDetail: detail
            )
        case .timedOut:
            return FinalResult(task: task, status: .failed, attempts: attempts, system: meta.system, error: "timed out")
        case .cancelled:
            let reason = body.isEmpty ? "cancelled" : String(decoding: body, as: UTF8.self)
            return FinalResult(task: task, status: .cancelled, attempts: attempts, system: meta.system, error: reason)
        }
    }

    // MARK: Liveness

    private func heartbeatTick() {
        self.connection?.send(.heartbeat(epoch: 0))
        let now = ContinuousClock.now
        if self.brokers.isGroup, self.liveness.silent(now: now) > self.heartbeat.expiry {
            self.switchBroker(to: nil, because: "went silent")
        } else if let since = self.leaderlessSince, now - since > self.brokerTimeout {
            self.leaderlessSince = nil
            self.failAll(
                CoordinatorError(
                    .connection,
                    "no broker of \(self.brokers.endpoints.joined(separator: ",")) led for \(DurationParser.format(self.brokerTimeout))"
                )
            )
        } else if self.liveness.isLost(now: .now) {
            self.failAll(
                CoordinatorError(
                    .connection,
                    "no word from the broker for \(DurationParser.format(self.liveness.timeout))"
                )
            )
        }
    }

    /// A new broker process (or one that forgot us): ask again for what is not answered yet.
    private func brokerRestarted() {
        if let submission = self.submission {
            for task in submission.unaccepted.values.sorted(by: { $0.id < $1.id }) {
                self.sendSubmit(task, job: submission.job)
            }
        }
        if let query = self.query { self.connection?.send(.jobQuery(job: query.job, follow: query.follow)) }
        if let waiter = self.cancelWaiter { self.connection?.send(.jobCancel(job: waiter.job)) }
    }

    private func sendSubmit(_ task: ScanTask, job: TaskID) {
        self.connection?.send(.submitToJob(task.id, attempt: task.attempt, task.envelope, input: task.input, job: job))
    }

    private func failAll(_ error: CoordinatorError) {
        if let submission = self.submission {
            self.lastAccepted = submission.accepted
            self.submission = nil
            submission.continuation.resume(throwing: error)
        }
        if let query = self.query {
            self.query = nil
            query.continuation.finish(throwing: error)
        }
        if let waiter = self.cancelWaiter {
            self.cancelWaiter = nil
            waiter.continuation.resume(throwing: error)
        }
    }
}
