import SkyNetCore
import ServiceLifecycle
import Logging
import Glibc
import ZeroMQ

// Starting, running and stopping (graceful or, when the journal fails, at once).
extension Broker {
    /// Opens the journal (in durable mode), binds both sockets and starts serving.
    /// - Returns: the bound endpoints (with the real ports when bound to `*`).
    /// - Throws: ``JournalError`` when the journal cannot be opened; ``ZMQError`` when an endpoint is
    ///   invalid or in use; ``EtcdError`` when etcd does not answer (HA mode); nothing is left bound
    ///   then.
    @discardableResult
    public func start() throws -> Endpoints {
        switch self.lifecycle {
        case .running(_, _, let endpoints): return endpoints
        case .stopped: throw ZMQError(code: ZMQError.terminatedCode, operation: "start a stopped broker")
        case .idle: break
        }
        try self.openJournal()
        // With CURVE, the ZAP handler is bound before either ROUTER (and the ROUTERs are CURVE
        // servers before they bind): no connection is ever accepted unauthenticated.
        if let security = self.configuration.security { try self.startSecurity(security) }
        let frontend: Socket
        let backend: Socket
        do {
            frontend = try Socket(self.reactor.context, type: .router)
            backend = try Socket(self.reactor.context, type: .router)
        } catch {
            self.stopSecurity()
            throw error
        }
        do throws(ZMQError) {
            try SocketSetup.router(frontend)
            try SocketSetup.router(backend)
            if let security = self.configuration.security {
                try Self.secure(frontend, security, domain: ZAPPolicy.frontendDomain)
                try Self.secure(backend, security, domain: ZAPPolicy.backendDomain)
            }
            try frontend.bind(self.configuration.frontend)
            try backend.bind(self.configuration.backend)
        } catch {
            frontend.close()
            backend.close()
            self.stopSecurity()
            throw error
        }
        let endpoints = Endpoints(frontend: try frontend.lastEndpoint(), backend: try backend.lastEndpoint())
        self.lifecycle = .running(frontend: frontend, backend: backend, endpoints: endpoints)
        // The per-turn handlers are closures isolated to this actor, holding it strongly until stop()
        // unregisters them (coordinators and workers do the same until close()): called on the
        // reactor, the actor's executor, they run at once. `[weak self] in self?.assumeIsolated {…}`
        // cost about 900 instructions a call (two executor checks, an allocation and a thunk), ~8% of
        // the broker's and the worker's own instructions per round trip (`make instructions`).
        // The sockets go to each call from the closure, which holds them: taken out of `lifecycle`
        // instead, each was retained and released (~10 times a latency round trip).
        self.reactor.register(frontend) { [frontend, backend] in self.drainFrontend(frontend, backend) }
        self.reactor.register(backend) { [backend] in self.drainBackend(backend) }
        self.watchAccepts(frontend, backend)
        self.heartbeatTimer = self.reactor.schedule(
            after: self.configuration.heartbeat.interval,
            every: self.configuration.heartbeat.interval
        ) { [weak self] in self?.assumeIsolated { $0.heartbeatTick() } }
        self.frontOutbox.requestFlushes(with: self.flushRequest)
        self.backOutbox.requestFlushes(with: self.flushRequest)
        self.flushHook = self.reactor.beforePoll(when: self.flushRequest) { [frontend, backend] in
            self.flushGathered(frontend, backend)
        }
        if let group = self.configuration.group {
            do throws(EtcdError) {
                try self.joinGroup(group)
            } catch {
                self.stop()
                throw error
            }
        }
        self.logger.info(
            "broker listening",
            metadata: [
                "frontend": "\(endpoints.frontend)", "backend": "\(endpoints.backend)",
                "epoch": "\(self.machine.epoch)",
            ]
        )
        return endpoints
    }

    /// Opens the journal (durable mode) and queues what it held again. Call before ``start()``;
    /// ``start()`` calls it for you when the configuration names a journal.
    /// - Throws: ``JournalError`` when the file cannot be opened or read, or another broker holds it.
    public func openJournal() throws(JournalError) {
        guard self.journal == nil, self.configuration.group == nil, let path = self.configuration.journalPath else {
            return
        }
        let clock = ContinuousClock()
        let began = clock.now
        let logger = self.logger
        let (journal, recovery) = try Journal.open(
            path: path,
            onCommit: { [weak self] seq in
                guard let self else { return }
                Task { await self.journalCommitted(seq) }
            },
            onFailure: { [weak self] error in
                // Crash-only: what is on disk is consistent up to the last commit; nothing after it was
                // acknowledged, so a restart on the same journal loses nothing that was promised.
                logger.critical("journal failed; stopping the broker", metadata: ["error": "\(error)"])
                guard let self else { return }
                Task { await self.journalFailed(error) }
            }
        )
        self.journal = journal
        let queued = self.recover(recovery)
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

    /// Serves until graceful shutdown (SIGTERM/SIGINT in a `ServiceGroup`) or cancellation, then
    /// finishes what is running (up to the shutdown grace) and stops.
    /// - Throws: what ``start()`` throws; a ``JournalError`` with code ``JournalError/Code/diskFailure``
    ///   when a journal write or sync failed (the broker has then stopped at once, as a crash would:
    ///   nothing after the last commit was acknowledged, and a restart on the journal loses nothing).
    public func run() async throws {
        if case .idle = self.lifecycle { try self.start() }
        // Wait here; the reactor serves the sockets meanwhile. Returns on shutdown, cancellation, or a
        // journal failure.
        let failures = self.journalFailures
        let failure = await withTaskGroup(of: JournalError?.self) { group in
            group.addTask {
                try? await gracefulShutdown()
                return nil
            }
            group.addTask {
                for await failure in failures { return failure }
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        if let failure { throw failure }
        await self.finishInFlight()
        self.stop()
        // The journal can fail while the broker stops too (the last results' records): that is the same
        // crash-only stop, and the caller hears it the same way.
        if let failure = self.journalFailure { throw failure }
    }

    /// The journal's writer failed: stop at once, as a crash would (nothing held is sent: what waits
    /// for the journal was never promised), and let ``run()`` end with the error. Only the goodbye
    /// goes out, so that peers act now rather than after their silence timeout: a coordinator's
    /// retry policy takes its unfinished tasks, a worker goes back to connecting.
    func journalFailed(_ error: JournalError) {
        if case .running(let frontend, let backend, _) = self.lifecycle {
            self.cancelTimers()
            self.stopWatchingAccepts(frontend, backend)
            self.reactor.unregister(frontend)
            self.reactor.unregister(backend)
            self.sayGoodbyeAndClose(
                frontend,
                backend,
                text: "its journal failed (\(error.message)); restart it on the same journal"
            )
        }
        self.stopSecurity()
        self.lifecycle = .stopped
        self.journal?.close()
        self.journalFailure = self.journalFailure ?? error
        self.journalFailureSink.yield(error)
    }

    /// Graceful shutdown: take no new tasks, dispatch none, and wait up to the shutdown grace for the
    /// results of tasks running on workers (and, durable, for the journal to hold them) so they reach
    /// their coordinators. Tasks still queued or running after that stay in the journal (durable) or
    /// go to their coordinators' retry policy when they hear the broker stop.
    func finishInFlight() async {
        guard case .running = self.lifecycle, !Task.isCancelled else { return }
        self.machine.beginStop()
        let clock = ContinuousClock()
        let began = clock.now
        let deadline = began + self.configuration.shutdownGrace
        let leased = self.machine.state.leasedCount
        if leased > 0 {
            self.logger.info(
                "stopping: waiting for running tasks",
                metadata: [
                    "running": "\(leased)", "grace": "\(DurationParser.format(self.configuration.shutdownGrace))",
                ]
            )
        }
        while !self.machine.isSettled, clock.now < deadline, !Task.isCancelled,
            self.journalFailure == nil
        {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let left = self.machine.state.leasedCount
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
            self.leaveGroup()
            return
        }
        // Messages held, gathered and parked behind a full pipe go first, in order, as far as they can.
        self.machine.acceptedHoldExpired()
        self.performEffects()
        self.flushGathered(frontend, backend, all: true)
        _ = try? self.frontOutbox.flush(on: frontend)
        _ = try? self.backOutbox.flush(on: backend)
        // Peers given a group's members go to the next one, which takes over once this one's lease
        // is revoked (below).
        self.cancelTimers()
        self.stopWatchingAccepts(frontend, backend)
        self.reactor.unregister(frontend)
        self.reactor.unregister(backend)
        self.sayGoodbyeAndClose(frontend, backend, text: "broker stopping")
        self.stopSecurity()
        self.lifecycle = .stopped
        if let failure = self.journal?.close() { self.journalFailure = self.journalFailure ?? failure }
        self.leaveGroup()
        self.logger.info("broker stopped", metadata: ["queued": "\(self.machine.state.queueDepth)"])
    }

    /// DISCONNECT (shutdown) to every connected worker and coordinator, then closes both sockets.
    /// The last forwarded RESULTs and the goodbyes may still be in libzmq's queues: the sockets get
    /// up to a second to send them after they close (a linger of 0 would drop them, and a
    /// coordinator would then wait out its broker timeout for results the broker had already sent).
    ///
    /// Before closing, what peers still send is read and dropped for up to 250 ms (less once they
    /// have been quiet for 50 ms): a TCP connection closed with unread data is reset, not ended, and
    /// the reset can destroy the goodbye in the peer's buffers before its libzmq reads it. Seen under
    /// load: a coordinator still sending SUBMITs to a broker whose journal had just failed missed its
    /// DISCONNECT and waited out its 15 s of silence (about one run in ten); a worker sending RESULTs
    /// the same. ZAP requests are answered meanwhile, so a peer that reconnects on its goodbye is not
    /// left in a handshake nobody answers (which it would report as a wrong key): it connects, is not
    /// answered, and finds the broker gone when the sockets close.
    private func sayGoodbyeAndClose(_ frontend: Socket, _ backend: Socket, text: String) {
        let goodbye = WireMessage.disconnect(.shutdown, text: text).encode()
        let (workers, coordinators) = self.machine.connectedPeers
        for worker in workers { _ = try? backend.send([worker.bytes] + goodbye) }
        for coordinator in coordinators { _ = try? frontend.send([coordinator.bytes] + goodbye) }
        try? frontend.set(.linger(milliseconds: 1000))
        try? backend.set(.linger(milliseconds: 1000))
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(250)
        var quietSince = clock.now
        while !workers.isEmpty || !coordinators.isEmpty, clock.now < deadline,
            clock.now - quietSince < .milliseconds(50)
        {
            self.drainZAP()
            var read = false
            for socket in [frontend, backend] {
                while let message = try? socket.receive() {
                    _ = consume message
                    read = true
                }
            }
            if read { quietSince = clock.now } else { usleep(2_000) }
        }
        frontend.close()
        backend.close()
    }

    func cancelTimers() {
        for timer in [self.heartbeatTimer, self.flushTimer, self.flushHook, self.acceptedTimer, self.bulkTimer] {
            if let timer { self.reactor.cancel(timer) }
        }
        (self.heartbeatTimer, self.flushTimer, self.flushHook, self.acceptedTimer, self.bulkTimer) = (
            nil, nil, nil, nil, nil
        )
        self.acceptedHoldArmed = false
        for timer in self.observers { self.reactor.cancel(timer) }
        self.observers.removeAll()
    }
}

// A listener that cannot accept (out of descriptors) says so: libzmq reports it only to a monitor,
// and a coordinator would otherwise hear nothing and blame the address. The monitors are read with
// each heartbeat, not polled by the reactor (two more poll items would cost every turn of the hot
// path), and one that reported is disarmed for a while: libzmq retries a failed accept at once, and
// would fill the log with hundreds of thousands of events a second.
extension Broker {
    /// How long a failed accept's monitor stays off after it reported one.
    static let acceptReportPause: Duration = .seconds(10)

    /// Monitors both ROUTERs for failed accepts only (no event on the usual path).
    func watchAccepts(_ frontend: Socket, _ backend: Socket) {
        self.watchAccepts(frontend, port: "frontend")
        self.watchAccepts(backend, port: "backend")
    }

    private func watchAccepts(_ socket: Socket, port: String) {
        self.acceptArmings += 1
        let name = "broker.\(port).\(self.epoch).\(self.acceptArmings)"
        guard let monitor = try? socket.monitor(name: name, kinds: [.acceptFailed]) else { return }
        self.acceptMonitors[port] = monitor
    }

    /// With each heartbeat: a failed accept since the last one is logged once, with its reason, and
    /// its monitor rests for ``acceptReportPause``.
    func checkAccepts(now: ContinuousClock.Instant) {
        guard case .running(let frontend, let backend, _) = self.lifecycle else { return }
        for (port, socket) in [("frontend", frontend), ("backend", backend)] {
            guard let monitor = self.acceptMonitors[port] else {
                if let resumes = self.acceptPausedUntil[port], now >= resumes {
                    self.acceptPausedUntil[port] = nil
                    self.watchAccepts(socket, port: port)
                }
                continue
            }
            var failure: SocketEvent?
            _ = try? monitor.receiveBatch(limit: 1024) { message in
                if failure == nil, let event = SocketEvent.decode(message), event.kind == .acceptFailed {
                    failure = event
                }
            }
            guard let failure else { continue }
            let reason = String(cString: strerror(Int32(bitPattern: failure.value)))
            let outOfFiles = failure.value == UInt32(EMFILE) || failure.value == UInt32(ENFILE)
            self.logger.error(
                outOfFiles
                    ? "cannot accept connections: out of file descriptors (\(reason)); raise the limit (ulimit -n, LimitNOFILE=) or find what holds them"
                    : "cannot accept a connection: \(reason)",
                metadata: ["port": "\(port)", "endpoint": "\(failure.endpoint)"]
            )
            socket.stopMonitoring()
            monitor.close()
            self.acceptMonitors[port] = nil
            self.acceptPausedUntil[port] = now + Self.acceptReportPause
        }
    }

    func stopWatchingAccepts(_ frontend: Socket, _ backend: Socket) {
        frontend.stopMonitoring()
        backend.stopMonitoring()
        for monitor in self.acceptMonitors.values { monitor.close() }
        self.acceptMonitors.removeAll()
    }
}
