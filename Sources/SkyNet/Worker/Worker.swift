public import Logging
public import ServiceLifecycle
public import ZeroMQ

/// A worker: one connection to the broker plus one ``ScanSystem`` (DESIGN.md §§2, 5).
///
/// The connection lives on a ``Reactor`` (this actor's executor); scans run in the ScanSystem's slots
/// on the global executor, as children of ``run()``'s task group. The worker sends READY with its
/// slot count, returns a RESULT for every TASK it receives (cancelled ones included, so the broker's
/// credit always comes back), heartbeats every interval, and re-creates its connection with backoff
/// when the broker goes silent for `heartbeat.expiry` or says DISCONNECT.
///
/// Graceful shutdown (SIGTERM/SIGINT in a `ServiceGroup`): the worker tells the broker it is draining
/// (no new tasks), finishes the scans it has within `drainTimeout` (then cancels the rest, which are
/// reported as cancelled), says DISCONNECT and returns.
public actor Worker: Service {
    public nonisolated let reactor: Reactor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    /// The worker's ScanSystem.
    public nonisolated let system: ScanSystem
    /// The routing id it presents to the broker.
    public nonisolated let id: PeerID
    private let configuration: WorkerConfiguration
    private let logger: Logger

    private enum Event: Sendable {
        case tasks([ScanTask])
        case drain
    }

    private enum Phase {
        case idle
        case connected(Socket)
        /// Waiting to re-create the connection.
        case reconnecting
        case draining(Socket?)
        case stopped
    }

    private var phase = Phase.idle
    private let events: AsyncStream<Event>
    private let eventSink: AsyncStream<Event>.Continuation
    private var outbox = Outbox()
    private var running: [TaskID: @Sendable () -> Void] = [:]
    private var received = 0
    private var lastHeard = ContinuousClock.now
    private var brokerEpoch: UInt32?
    private var backoff: Backoff
    private var timers: [TimerID] = []
    private var flushTimer: TimerID?

    /// Creates a worker; ``run()`` connects it.
    public init(
        configuration: WorkerConfiguration,
        reactor: Reactor,
        logger: Logger,
        scanners: [any Scanner] = [SectorScanner()]
    ) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        self.system = ScanSystem(name: configuration.name, slots: configuration.slots, scanners: scanners)
        self.id = PeerID.unique(prefix: "w")
        self.backoff = configuration.reconnect
        (self.events, self.eventSink) = AsyncStream.makeStream(of: Event.self)
    }

    /// Tasks received since start.
    public var tasksReceived: Int { self.received }

    /// Connects and serves until graceful shutdown (then drains) or cancellation.
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
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await event in self.events {
                    switch event {
                    case .tasks(let tasks):
                        for task in tasks {
                            group.addTask { await self.execute(task) }
                        }
                    case .drain:
                        self.beginDrain()
                    }
                }
                // Cancelled (not drained): the group cancels the running scans, whose results are dropped.
            }
        } onGracefulShutdown: {
            sink.yield(.drain)
        }
        self.close()
    }

    // MARK: Connection

    private func connect() throws(ZMQError) {
        let socket = try Socket(self.reactor.context, type: .dealer)
        do throws(ZMQError) {
            try SocketSetup.dealer(socket, id: self.id)
            try socket.connect(self.configuration.broker)
        } catch {
            socket.close()
            throw error
        }
        self.reactor.register(socket) { [weak self] in self?.assumeIsolated { $0.drain() } }
        self.phase = .connected(socket)
        self.outbox.removeAll()
        self.lastHeard = .now
        self.send(.ready(capacity: UInt32(self.configuration.slots), self.readyInfo))
        self.logger.info(
            "worker connecting",
            metadata: [
                "broker": "\(self.configuration.broker)", "worker.name": "\(self.configuration.name)",
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

    private var socket: Socket? {
        switch self.phase {
        case .connected(let socket): socket
        case .draining(let socket): socket
        case .idle, .reconnecting, .stopped: nil
        }
    }

    /// Drops the connection and makes a new one after a backoff delay. Results parked for the old
    /// broker connection are dropped: a broker that stayed silent this long has requeued those tasks.
    private func reconnect(reason: String) {
        guard case .connected(let socket) = self.phase else { return }
        self.reactor.unregister(socket)
        socket.close()
        self.outbox.removeAll()
        self.phase = .reconnecting
        self.logger.warning("lost the broker, reconnecting", metadata: ["reason": "\(reason)"])
        self.scheduleConnect()
    }

    private func scheduleConnect() {
        let delay = self.backoff.next() ?? self.configuration.reconnect.maximum
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
        if let timer = self.flushTimer { self.reactor.cancel(timer) }
        self.flushTimer = nil
        if let socket = self.socket {
            self.reactor.unregister(socket)
            // Give the last RESULTs and the goodbye up to 2 s to leave before the socket goes.
            try? socket.set(.linger(milliseconds: 2000))
            socket.close()
        }
        self.phase = .stopped
        self.eventSink.finish()
    }

    // MARK: Receiving

    private func drain() {
        guard let socket = self.socket else { return }
        var batch: [ScanTask] = []
        for _ in 0..<256 {
            var received: Multipart?
            do throws(ZMQError) {
                received = try socket.receive()
            } catch {
                self.logger.error("receive failed", metadata: ["error": "\(error)"])
                break
            }
            guard let message = received.take() else { break }
            let decoded: WireMessage
            do throws(ProtocolError) {
                decoded = try WireMessage.decode(message)
            } catch {
                self.logger.warning("bad message from broker dropped", metadata: ["reason": "\(error)"])
                continue
            }
            self.lastHeard = .now
            self.backoff.reset()
            switch decoded {
            case .task(let id, let attempt, let envelope, let input):
                self.received += 1
                batch.append(ScanTask(id: id, attempt: attempt, envelope: envelope, input: input))
            case .cancel(let id):
                self.running[id]?()
            case .heartbeat(let epoch):
                if let known = self.brokerEpoch, known != epoch {
                    self.logger.info("broker restarted, registering again")
                    self.send(.ready(capacity: UInt32(self.configuration.slots), self.readyInfo))
                }
                self.brokerEpoch = epoch
            case .disconnect(.unknownPeer, _):
                // The broker does not know us (it restarted or expired us): register again.
                self.send(.ready(capacity: UInt32(self.configuration.slots), self.readyInfo))
            case .disconnect(let reason, let text):
                self.logger.info("broker said disconnect", metadata: ["reason": "\(reason): \(text)"])
                if case .connected = self.phase { self.reconnect(reason: "broker said \(reason)") }
                return
            default:
                self.logger.warning("unexpected \(decoded.commandName) from broker dropped")
            }
        }
        if !batch.isEmpty { self.eventSink.yield(.tasks(batch)) }
    }

    // MARK: Running tasks

    /// Runs one task in the ScanSystem and sends its RESULT. Runs as a child of `run()`'s task group.
    private nonisolated func execute(_ task: ScanTask) async {
        // The scan runs in its own task so that a CANCEL can reach exactly this one; it is awaited
        // right here and cancelled with its parent, so it never outlives this child.
        let scan = Task { [system] in await system.run(task) }
        await self.started(task.id, cancel: { scan.cancel() })
        let result = await withTaskCancellationHandler {
            await scan.value
        } onCancel: {
            scan.cancel()
        }
        await self.finished(result)
    }

    private func started(_ id: TaskID, cancel: @escaping @Sendable () -> Void) {
        self.running[id] = cancel
    }

    private func finished(_ result: ScanResult) {
        self.running[result.id] = nil
        self.send(
            .result(result.id, attempt: result.attempt, result.outcome.status, result.meta, body: result.outcome.body)
        )
        if case .draining = self.phase, self.running.isEmpty { self.finishDrain() }
    }

    // MARK: Draining

    private func beginDrain() {
        guard case .connected(let socket) = self.phase else {
            if case .reconnecting = self.phase { self.phase = .draining(nil) }
            self.finishDrainIfIdle()
            return
        }
        self.phase = .draining(socket)
        self.send(.disconnect(.draining, text: "worker shutting down"))
        self.logger.info(
            "draining",
            metadata: ["running": "\(self.running.count)", "timeout": "\(self.configuration.drainTimeout)"]
        )
        self.timers.append(
            self.reactor.schedule(after: self.configuration.drainTimeout) { [weak self] in
                self?.assumeIsolated { worker in
                    guard case .draining = worker.phase, !worker.running.isEmpty else { return }
                    worker.logger.warning(
                        "drain timeout, cancelling running scans",
                        metadata: ["running": "\(worker.running.count)"]
                    )
                    for cancel in worker.running.values { cancel() }
                }
            }
        )
        self.finishDrainIfIdle()
    }

    private func finishDrainIfIdle() {
        if self.running.isEmpty { self.finishDrain() }
    }

    private func finishDrain() {
        self.send(.disconnect(.shutdown, text: "worker stopped"))
        self.logger.info("drained")
        self.eventSink.finish()
    }

    // MARK: Sending and time

    private func send(_ message: WireMessage) {
        guard let socket = self.socket else { return }
        do throws(ZMQError) {
            if try self.outbox.send(message.encode(), to: Outbox.direct, on: socket) == .parked { self.armFlush() }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    private func armFlush() {
        guard self.flushTimer == nil else { return }
        self.flushTimer = self.reactor.schedule(after: .milliseconds(2), every: .milliseconds(5)) { [weak self] in
            self?.assumeIsolated { $0.flush() }
        }
    }

    private func flush() {
        if let socket = self.socket {
            _ = try? self.outbox.flush(on: socket)
        }
        if self.outbox.isEmpty || self.socket == nil, let timer = self.flushTimer {
            self.reactor.cancel(timer)
            self.flushTimer = nil
        }
    }

    private func heartbeatTick() {
        guard self.socket != nil else { return }
        self.send(.heartbeat(epoch: 0))
        if case .connected = self.phase, ContinuousClock.now - self.lastHeard > self.configuration.heartbeat.expiry {
            self.reconnect(reason: "no heartbeat for \(self.configuration.heartbeat.expiry)")
        }
    }
}

extension Optional where Wrapped: ~Copyable {
    /// Moves the value out, leaving nil.
    mutating func take() -> Wrapped? {
        switch consume self {
        case .some(let value):
            self = nil
            return value
        case .none:
            self = nil
            return nil
        }
    }
}
