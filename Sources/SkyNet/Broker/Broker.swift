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
    private var badInput: [String: Int] = [:]
    private var badLog = RateLimitedLog()

    /// Creates a broker; ``start()`` or ``run()`` binds it.
    public init(configuration: BrokerConfiguration = BrokerConfiguration(), reactor: Reactor, logger: Logger) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        self.state = BrokerState(heartbeat: configuration.heartbeat, maxQueued: configuration.maxQueuedTasks)
        self.epoch = UInt32.random(in: 1...UInt32.max)
    }

    /// Binds both sockets and starts serving.
    /// - Returns: the bound endpoints (with the real ports when bound to `*`).
    /// - Throws: ``ZMQError`` when an endpoint is invalid or in use; nothing is left bound then.
    @discardableResult
    public func start() throws(ZMQError) -> Endpoints {
        switch self.lifecycle {
        case .running(_, _, let endpoints): return endpoints
        case .stopped: throw ZMQError(code: ZMQError.terminatedCode, operation: "start a stopped broker")
        case .idle: break
        }
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
        self.reactor.register(frontend) { [weak self] in self?.assumeIsolated { $0.drainFrontend() } }
        self.reactor.register(backend) { [weak self] in self?.assumeIsolated { $0.drainBackend() } }
        self.heartbeatTimer = self.reactor.schedule(
            after: self.configuration.heartbeat.interval,
            every: self.configuration.heartbeat.interval
        ) { [weak self] in self?.assumeIsolated { $0.heartbeatTick() } }
        self.logger.info(
            "broker listening",
            metadata: [
                "frontend": "\(endpoints.frontend)", "backend": "\(endpoints.backend)", "epoch": "\(self.epoch)",
            ]
        )
        return endpoints
    }

    /// Serves until graceful shutdown (SIGTERM/SIGINT in a `ServiceGroup`) or cancellation, then stops.
    public func run() async throws {
        if case .idle = self.lifecycle { try self.start() }
        // Wait here; the reactor serves the sockets meanwhile. Returns on shutdown or cancellation.
        try? await gracefulShutdown()
        self.stop()
    }

    /// Tells every peer the broker is going away, then closes both sockets.
    public func stop() {
        guard case .running(let frontend, let backend, _) = self.lifecycle else {
            self.lifecycle = .stopped
            return
        }
        let goodbye = WireMessage.disconnect(.shutdown, text: "broker stopping").encode()
        for worker in self.state.workers.keys { _ = try? backend.send([worker.bytes] + goodbye) }
        for coordinator in self.state.coordinators.keys { _ = try? frontend.send([coordinator.bytes] + goodbye) }
        if let timer = self.heartbeatTimer { self.reactor.cancel(timer) }
        if let timer = self.flushTimer { self.reactor.cancel(timer) }
        self.reactor.unregister(frontend)
        self.reactor.unregister(backend)
        frontend.close()
        backend.close()
        self.lifecycle = .stopped
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
            try backend.receiveBatch { message in self.handleWorker(&message) }
        } catch {
            self.logger.error("backend receive failed", metadata: ["error": "\(error)"])
        }
    }

    private func handleWorker(_ message: inout Multipart) {
        guard let (peer, result) = self.decodeRouted(message, side: "backend") else { return }
        let now = ContinuousClock.now
        let decoded: WireMessage
        switch result {
        case .success(let message): decoded = message
        case .failure(let error):
            if self.state.workers[peer] != nil {
                let reason: DisconnectReason = error.code == .badVersion ? .version : .protocolError
                self.sendToWorker(peer, .disconnect(reason, text: error.description))
                self.perform(self.state.workerLost(peer, reason: "protocol error"))
            }
            return
        }
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
        case .result(let id, let attempt, _, _, _):
            let (disposition, actions) = self.state.workerResult(peer, taskID: id, attempt: attempt, now: now)
            switch disposition {
            case .forward(let coordinator):
                self.forwardToCoordinator(coordinator, &message)
            case .stale:
                self.logger.debug("stale result dropped", metadata: ["task.id": "\(id)", "attempt": "\(attempt)"])
            case .unknownWorker:
                self.sendToWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY"))
            }
            self.perform(actions)
        case .progress(let id, let attempt, _):
            _ = self.state.workerSeen(peer, now: now)
            if let entry = self.state.tasks[id], entry.worker == peer, entry.attempt == attempt {
                self.forwardToCoordinator(entry.coordinator, &message)
            }
        case .submit, .accepted, .rejected, .task, .cancel, .statusRequest, .statusReply:
            self.rejectInput(
                ProtocolError(.wrongDirection, "worker sent \(decoded.commandName)"),
                from: peer,
                side: "backend"
            )
        }
    }

    // MARK: Coordinators (frontend)

    private func drainFrontend() {
        guard case .running(let frontend, _, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            try frontend.receiveBatch { message in self.handleCoordinator(message) }
        } catch {
            self.logger.error("frontend receive failed", metadata: ["error": "\(error)"])
        }
    }

    private func handleCoordinator(_ message: borrowing Multipart) {
        guard let (peer, result) = self.decodeRouted(message, side: "frontend") else { return }
        let now = ContinuousClock.now
        let decoded: WireMessage
        switch result {
        case .success(let message): decoded = message
        case .failure(let error):
            if error.code == .badVersion {
                self.sendToCoordinator(peer, .disconnect(.version, text: error.description))
            }
            return
        }
        switch decoded {
        case .submit(let id, let attempt, let envelope, let input):
            self.perform(
                self.state.submit(id, attempt: attempt, envelope: envelope, input: input, from: peer, now: now)
            )
        case .heartbeat:
            if self.state.coordinatorSeen(peer, now: now) {
                // A new coordinator: answer at once, so it knows within one round trip that we are here.
                self.sendToCoordinator(peer, .heartbeat(epoch: self.epoch))
            }
        case .cancel(let id):
            self.state.coordinatorSeen(peer, now: now)
            self.perform(self.state.cancel(id, from: peer))
        case .statusRequest:
            self.sendToCoordinator(peer, .statusReply(json: self.status().json()))
        case .disconnect:
            self.perform(self.state.coordinatorLost(peer))
            self.frontOutbox.drop(peer)
        case .ready, .accepted, .rejected, .task, .result, .progress, .statusReply:
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
                guard let entry = self.state.tasks[id] else { continue }
                self.sendToWorker(worker, .task(id, attempt: entry.attempt, entry.envelope, input: entry.input))
            case .accepted(let coordinator, let id, let attempt, let requeued):
                self.sendToCoordinator(coordinator, .accepted(id, attempt: attempt, requeued: requeued))
            case .rejected(let coordinator, let id, let reason, let text):
                self.sendToCoordinator(coordinator, .rejected(id, reason, text: text))
            case .resultForCoordinator(let coordinator, let id, let attempt, let status, let reason):
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

    private func sendToWorker(_ worker: PeerID, _ message: WireMessage) {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try self.backOutbox.send(message.encode(), to: worker, on: backend)
        } catch {
            self.logger.error("send to worker failed", metadata: ["worker.id": "\(worker)", "error": "\(error)"])
            return
        }
        self.handle(outcome, peer: worker, front: false)
    }

    private func sendToCoordinator(_ coordinator: PeerID, _ message: WireMessage) {
        guard case .running(let frontend, _, _) = self.lifecycle else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try self.frontOutbox.send(message.encode(), to: coordinator, on: frontend)
        } catch {
            self.logger.error(
                "send to coordinator failed",
                metadata: ["coordinator.id": "\(coordinator)", "error": "\(error)"]
            )
            return
        }
        self.handle(outcome, peer: coordinator, front: true)
    }

    /// Forwards a worker's RESULT or PROGRESS (frames after the routing id) without copying its payload.
    private func forwardToCoordinator(_ coordinator: PeerID, _ message: inout Multipart) {
        guard case .running(let frontend, _, _) = self.lifecycle else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try self.frontOutbox.forward(&message, from: 1, to: coordinator, on: frontend)
        } catch {
            self.logger.error(
                "forward to coordinator failed",
                metadata: ["coordinator.id": "\(coordinator)", "error": "\(error)"]
            )
            return
        }
        self.handle(outcome, peer: coordinator, front: true)
    }

    private func handle(_ outcome: Outbox.Outcome, peer: PeerID, front: Bool) {
        switch outcome {
        case .sent: break
        case .parked: self.armFlush()
        case .unreachable: self.peerUnreachable(peer, front: front)
        }
    }

    private func peerUnreachable(_ peer: PeerID, front: Bool) {
        if front {
            self.logger.info("coordinator unreachable", metadata: ["coordinator.id": "\(peer)"])
            self.frontOutbox.drop(peer)
            self.perform(self.state.coordinatorLost(peer))
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
        self.perform(self.state.tick(now: .now))
        let beat = WireMessage.heartbeat(epoch: self.epoch)
        for worker in self.state.workers.keys { self.sendToWorker(worker, beat) }
        for coordinator in self.state.coordinators.keys { self.sendToCoordinator(coordinator, beat) }
    }

    /// Splits a ROUTER message into its sender and its decoded command. Bad input is counted and
    /// logged here; nil when there is not even a sender.
    private func decodeRouted(
        _ message: borrowing Multipart,
        side: String
    ) -> (PeerID, Result<WireMessage, ProtocolError>)? {
        guard message.count >= 2, !message.overflowed else {
            self.rejectInput(ProtocolError(.badFrameCount, "\(message.count) frames"), from: nil, side: side)
            return nil
        }
        let peer = PeerID(message.bytes(of: 0))
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
