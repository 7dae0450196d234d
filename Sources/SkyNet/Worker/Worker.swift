import SkyNetCore
public import Logging
public import ServiceLifecycle
public import ZeroMQ
import Synchronization

/// A worker: one connection to the broker plus one ``ScanSystem`` (DESIGN.md §§2, 5).
///
/// The connection lives on a ``Reactor`` (this actor's executor); a scan its scanner can answer at
/// once runs right there as the TASK arrives; others run in the ScanSystem's slots on the global
/// executor (or on the reactor, when they never block), each in a task the worker starts and
/// keeps in `running` (to cancel it: CANCEL, a deadline, a drain timeout, or the worker's own
/// cancellation). Finished scans put their results in a buffer; the first to find it empty hops to
/// the reactor once to send all that are there, so a burst of results costs one wake-up. The worker sends READY with its
/// slot count, returns a RESULT for every TASK it receives (cancelled ones included, so the broker's
/// credit always comes back), heartbeats every interval, and re-creates its connection with backoff
/// when the broker goes silent for `heartbeat.expiry` or says DISCONNECT.
///
/// Graceful shutdown (SIGTERM/SIGINT in a `ServiceGroup`): the worker tells the broker it is draining
/// (no new tasks), finishes the scans it has within `drainTimeout` (then cancels the rest, which are
/// reported as cancelled), says DISCONNECT and returns.
public actor Worker: Service {
    /// The reactor whose thread runs this worker and owns its connection.
    public nonisolated let reactor: Reactor
    /// The reactor, as this actor's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    /// The worker's ScanSystem.
    public nonisolated let system: ScanSystem
    /// The routing id it presents to the broker.
    package nonisolated let id: PeerID
    // Members that are not private here are used by the scans' half of the worker
    // (Worker+Scans.swift).
    private let configuration: WorkerConfiguration
    let logger: Logger
    /// Whether ``logger`` logs debug messages, read once: asked for each task's "scan started", the
    /// logger copied its handler (an existential) and asked it for its level (~80 instructions).
    let logsDebug: Bool

    private enum Event: Sendable {
        case drain
        /// The broker refused this worker (its key, a failed handshake, the wrong port): it stops.
        case refused(SecurityError)
    }

    enum Phase {
        case idle
        case connected(DealerConnection)
        /// Waiting to re-create the connection.
        case reconnecting
        case draining(DealerConnection?)
        case stopped

        /// Read in place (`if case .draining = self.phase` copied the phase, connection and all).
        var isDraining: Bool {
            if case .draining = self { true } else { false }
        }
    }

    var phase = Phase.idle
    private let events: AsyncStream<Event>
    private let eventSink: AsyncStream<Event>.Continuation
    /// The scans running or waiting for a slot loop, by task: how to cancel each (``cancelRun(_:)``).
    var running: [TaskID: Running] = [:]
    /// The number the next scan in a slot loop gets.
    var nextRun: SlotLoops.Run = 0
    /// The loops that run scans that wait on this reactor (``SlotLoops``).
    lazy var slotLoops = SlotLoops(system: self.system, reactor: self.reactor) { [weak self] _, result in
        self?.assumeIsolated { $0.finished(result) }
    }
    // Written for every TASK, so unchecked in release builds (see docs/DESIGN.md §3, "Unchecked
    // exclusivity"): the TASKs received, a plain count; the broker as heard on this connection (when,
    // its epoch and interval, whether it answered), a value changed only by its own mutating methods,
    // which call out to nothing; the reconnects since the broker last answered (the backoff grows
    // with them), a plain count.
    #if DEBUG
    private var received = 0
    private var liveness: BrokerLiveness
    private var reconnects: UInt32 = 0
    #else
    @exclusivity(unchecked) private var received = 0
    @exclusivity(unchecked) private var liveness: BrokerLiveness
    @exclusivity(unchecked) private var reconnects: UInt32 = 0
    #endif
    /// It has answered on some connection (the next registration is "again").
    private var everRegistered = false
    /// The broker that last answered this worker: its key is right, so a reconnect there does not
    /// call a broken handshake a wrong key (``HandshakeWatch/keyAccepted``).
    private var acceptedBy: String?
    /// The drain timed out and the running tasks were handed back to the broker (which requeues
    /// them): their cancelled scans send no RESULT.
    var handedBack = false
    /// Deadline timers of running tasks, on the reactor: they cancel a scan at its deadline even when
    /// every thread of the concurrency pool is busy with CPU-bound scans.
    var deadlines: [TaskID: TimerID] = [:]
    /// Earlier runs, still finishing, of tasks that were sent again (see ``startScan(_:)``).
    var overlapping: [TaskID: Int] = [:]
    /// Tasks whose scan was cancelled because its deadline passed: reported as timed out.
    var timedOut: Set<TaskID> = []
    private var standbyLog = RateLimitedLog(perSecond: 1)
    private var timers: [TimerID] = []
    /// The broker, or the members of its HA group, and which one this worker talks to.
    private var brokers: BrokerList
    /// A READY to a standby waits a moment before it is asked again.
    private var askAgain: TimerID?
    /// Results of finished scans waiting to be sent from the reactor.
    let finishedResults = Mutex<[ScanResult]>([])

    /// Creates a worker; ``run()`` connects it.
    public init(
        configuration: WorkerConfiguration,
        reactor: Reactor,
        logger: Logger,
        scanners: [any TaskScanner]
    ) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        self.logsDebug = logger.logLevel <= .debug
        self.system = ScanSystem(name: configuration.name, slots: configuration.slots, scanners: scanners)
        self.id = PeerID.unique(prefix: "w")
        self.liveness = BrokerLiveness(timeout: configuration.heartbeat.expiry)
        self.brokers = BrokerList(configuration.broker)
        (self.events, self.eventSink) = AsyncStream.makeStream(of: Event.self)
    }

    /// Tasks received since start.
    public var tasksReceived: Int { self.received }

    /// Connects and serves until graceful shutdown (then drains) or cancellation.
    /// - Throws: ``SecurityError`` (code `.refused`) when the broker refuses this worker: its key is
    ///   not in the workers' allowlist (or was removed from it), the CURVE handshake failed (a wrong
    ///   broker key, CURVE on one side only), or the endpoint is the broker's coordinators' port.
    ///   Retrying would not mend any of these, so the worker stops.
    public func run() async throws {
        try self.connect()
        self.timers.append(
            self.reactor.schedule(
                after: self.configuration.heartbeat.interval,
                every: self.configuration.heartbeat.interval
            ) {
                [weak self] in self?.assumeIsolated { $0.heartbeatTick() }
            }
        )
        let sink = self.eventSink
        let refusal: SecurityError? = await withGracefulShutdownHandler {
            for await event in self.events {
                switch event {
                case .drain: self.beginDrain()
                case .refused(let error): return error
                }
            }
            return nil
        } onGracefulShutdown: {
            sink.yield(.drain)
        }
        if let refusal {
            self.handedBack = true
            self.cancelAll()
            self.close()
            throw refusal
        }
        if Task.isCancelled {
            // Cancelled (not drained): the running scans are cancelled and their results dropped.
            self.handedBack = true
            self.cancelAll()
        }
        self.close()
    }

    // MARK: Connection

    private func connect() throws(ZMQError) {
        let connection = try DealerConnection(
            reactor: self.reactor,
            endpoint: self.brokers.current,
            id: self.id,
            role: .worker,
            security: self.configuration.security,
            keyAccepted: self.acceptedBy == self.brokers.current,
            logger: self.logger,
            onReadable: { self.drain() },  // isolated to this actor: see Broker.start()
            onFailure: { self.eventSink.yield(.refused($0)) }
        )
        self.phase = .connected(connection)
        self.liveness.connected(now: .now)
        self.register()
        self.logger.info(
            "worker connecting",
            metadata: [
                "broker": "\(self.brokers.current)", "worker.name": "\(self.configuration.name)",
                "slots": "\(self.configuration.slots)",
            ]
        )
    }

    private var readyInfo: ReadyInfo {
        ReadyInfo(
            name: self.configuration.name,
            kinds: self.system.kinds,
            heartbeatMilliseconds: self.configuration.heartbeat.intervalMilliseconds,
            version: SkyNetVersion.current
        )
    }

    var connection: DealerConnection? {
        switch self.phase {
        case .connected(let connection): connection
        case .draining(let connection): connection
        case .idle, .reconnecting, .stopped: nil
        }
    }

    /// Drops the connection and makes a new one after a backoff delay. Results parked for the old
    /// broker connection are dropped: a broker that stayed silent this long has requeued those tasks.
    private func reconnect(reason: String) {
        guard case .connected(let connection) = self.phase else { return }
        connection.close()
        self.phase = .reconnecting
        let lost = self.brokers.current
        if self.brokers.isGroup {
            let next = self.brokers.silent(now: .now)
            self.logger.warning("lost the broker at \(lost); trying \(next)", metadata: ["reason": "\(reason)"])
        } else if self.liveness.answered {
            self.logger.warning("lost the broker, reconnecting", metadata: ["reason": "\(reason)"])
        } else {
            self.logger.warning(
                "cannot reach the broker at \(lost) (no answer within \(self.configuration.heartbeat.expiry)); is `skynet broker` running there, with its backend (workers') port here? retrying"
            )
        }
        self.scheduleConnect()
    }

    /// A member of an HA group that does not lead answered: go where it says the leader is, or ask
    /// it again shortly (a standby answers as the leader once it has won).
    private func notLeader(hint: String) {
        guard case .connected(let connection) = self.phase else { return }
        let from = self.brokers.current
        if let next = self.brokers.notLeader(hint: hint, now: .now) {
            self.logger.notice("the broker at \(from) does not lead; switching to \(next)")
            connection.close()
            self.phase = .reconnecting
            self.reconnects = 0
            self.scheduleConnect()
            return
        }
        if !self.brokers.isGroup {
            self.standbyLog.log(
                self.logger,
                level: .warning,
                "the broker at \(from) is a standby of an HA group\(hint.isEmpty ? "" : " (the leader is \(hint))"): give workers every member (--broker tcp://a:5556,tcp://b:5556); asking it again"
            )
        }
        guard self.askAgain == nil else { return }
        self.askAgain = self.reactor.schedule(after: .milliseconds(250)) { [weak self] in
            self?.assumeIsolated { worker in
                worker.askAgain = nil
                if case .connected = worker.phase, !worker.liveness.answered { worker.register() }
            }
        }
    }

    private func scheduleConnect() {
        self.reconnects = min(self.reconnects + 1, 64)
        let delay = self.configuration.reconnect.delay(before: self.reconnects + 1)
        self.reactor.schedule(after: delay) { [weak self] in
            self?.assumeIsolated { worker in
                guard case .reconnecting = worker.phase else { return }
                do throws(ZMQError) {
                    try worker.connect()
                } catch {
                    worker.logger.error("reconnect failed", metadata: ["error": "\(error)"])
                    worker.scheduleConnect()
                }
            }
        }
    }

    private func close() {
        for timer in self.timers { self.reactor.cancel(timer) }
        self.timers.removeAll()
        // Give the last RESULTs and the goodbye up to 2 s to leave before the socket goes.
        self.connection?.close(linger: .seconds(2))
        self.phase = .stopped
        self.eventSink.finish()
        for task in self.slotLoops.close() { self.finished(self.cancelled(task)) }
    }

    // MARK: Receiving

    private func drain() {
        guard let connection = self.connection else { return }
        // One reading of the clock for everything this turn received (it was all there by now).
        let now = ContinuousClock.now
        // A DISCONNECT handled in here closes the socket, which ends the batch.
        connection.receiveMessages(
            tasks: { id, attempt, envelope, input in
                self.handleTask(id, attempt: attempt, envelope, input: input, now: now, on: connection)
            },
            { message in self.handle(message, now: now) }
        )
    }

    /// A TASK read in place (one of a BATCH's, the usual way tasks come): what ``handle(_:now:)``
    /// does with a decoded one.
    private func handleTask(
        _ id: TaskID,
        attempt: UInt32,
        _ envelope: TaskEnvelope,
        input: UnsafeRawBufferPointer,
        now: ContinuousClock.Instant,
        on connection: DealerConnection
    ) {
        self.reconnects = 0
        self.liveness.heard(now: now)
        self.received += 1
        self.start(id, attempt: attempt, envelope, input: input, on: connection)
    }

    private func handle(_ decoded: WireMessage, now: ContinuousClock.Instant) {
        self.reconnects = 0
        switch self.liveness.hear(decoded, now: now) {
        case .answered(let restarted)?:
            self.logger.notice(
                self.everRegistered ? "registered with the broker again" : "registered with the broker",
                metadata: ["broker": "\(self.brokers.current)", "slots": "\(self.configuration.slots)"]
            )
            self.everRegistered = true
            self.acceptedBy = self.brokers.current
            if restarted { self.brokerRestarted() }
        case .restarted?:
            self.brokerRestarted()
        case .forgotten?:
            // The broker does not know us (it restarted or expired us): register again.
            self.register()
        case .refused(let text)?:
            self.logger.info("the broker refused this worker", metadata: ["reason": "\(text)"])
            self.eventSink.yield(.refused(SecurityError(.refused, text)))
        case .notLeader(let hint)?:
            self.notLeader(hint: hint)
        case .leaving(let reason, let text)?:
            self.logger.info("broker said disconnect", metadata: ["reason": "\(reason): \(text)"])
            if case .connected = self.phase { self.reconnect(reason: "broker said \(reason)") }
        case nil:
            switch decoded {
            case .task(let id, let attempt, let envelope, let input):
                self.received += 1
                let connection = self.connection
                input.withUnsafeBytes { self.start(id, attempt: attempt, envelope, input: $0, on: connection) }
            case .cancel(let id):
                self.cancelRun(id)
            case .heartbeat:
                break
            default:
                self.logger.warning("unexpected \(decoded.commandName) from broker dropped")
            }
        }
    }

    /// A new broker process: it knows nothing of this worker.
    private func brokerRestarted() {
        self.logger.info("broker restarted, registering again")
        self.register()
    }

    // MARK: Draining

    private func beginDrain() {
        guard case .connected(let connection) = self.phase else {
            if case .reconnecting = self.phase { self.phase = .draining(nil) }
            self.finishDrainIfIdle()
            return
        }
        self.phase = .draining(connection)
        self.send(.disconnect(.draining, text: "worker shutting down"))
        self.logger.info(
            "draining",
            metadata: ["running": "\(self.running.count)", "timeout": "\(self.configuration.drainTimeout)"]
        )
        self.timers.append(
            self.reactor.schedule(after: self.configuration.drainTimeout) { [weak self] in
                self?.assumeIsolated { worker in
                    guard case .draining = worker.phase, !worker.running.isEmpty else { return }
                    // Hand the unfinished tasks back: the broker requeues a departed worker's leases
                    // (they are not failed), then the scans here are cancelled without a RESULT.
                    worker.logger.warning(
                        "drain timeout, handing the running tasks back to the broker",
                        metadata: ["running": "\(worker.running.count)"]
                    )
                    worker.send(
                        .disconnect(.shutdown, text: "drain timeout; \(worker.running.count) tasks handed back")
                    )
                    worker.handedBack = true
                    worker.cancelAll()
                }
            }
        )
        self.finishDrainIfIdle()
    }

    private func finishDrainIfIdle() {
        if self.running.isEmpty { self.finishDrain() }
    }

    func finishDrain() {
        if !self.handedBack { self.send(.disconnect(.shutdown, text: "worker stopped")) }
        self.logger.info("drained")
        self.eventSink.finish()
    }

    // MARK: Sending and time

    private func send(_ message: WireMessage) {
        self.connection?.send(message)
    }

    /// READY, then this worker's figures at once (the broker's dashboard shows its host from the start).
    private func register() {
        // The broker's credit: the slots, and the tasks held for them (``WorkerConfiguration/prefetch``).
        let capacity = self.configuration.slots + max(0, self.configuration.prefetch)
        self.send(.ready(capacity: UInt32(clamping: capacity), self.readyInfo))
        self.sendFigures()
    }

    private func heartbeatTick() {
        guard self.connection != nil else { return }
        self.send(.heartbeat(epoch: 0))
        self.sendFigures()
        let now = ContinuousClock.now
        if case .connected = self.phase, self.liveness.silent(now: now) > self.liveness.timeout {
            self.reconnect(reason: "no heartbeat for \(DurationParser.format(self.liveness.timeout))")
        }
    }

    private func sendFigures() {
        let (running, done, failed) = self.system.counts
        let (resident, cpu) = WorkerFigures.process()
        self.send(
            .figures(
                WorkerFigures(
                    running: running,
                    done: done,
                    failed: failed,
                    residentBytes: resident,
                    cpuSeconds: cpu,
                    host: WorkerFigures.hostName
                )
            )
        )
    }
}
