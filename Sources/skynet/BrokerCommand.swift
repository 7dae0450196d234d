import ArgumentParser
import Glibc
import Logging
import ServiceLifecycle
import SkyNet
import SkyNetCLI
import SkyNetHTTP
import UnixSignals
import ZeroMQ

struct BrokerCommand: AsyncParsableCommand, CheckedArguments {
    static let configuration = CommandConfiguration(
        commandName: "broker",
        abstract: "Run a broker: coordinators connect to the frontend, workers to the backend.",
        discussion: """
            On SIGTERM or SIGINT it stops taking tasks, waits up to --shutdown-grace for the results of tasks \
            running on workers, then tells workers and coordinators it is going away and exits. In durable mode \
            (--journal) tasks still queued or running stay in the journal and run after a restart.

            It listens on loopback by default. To serve other hosts, bind them (--frontend tcp://*:5555 \
            --backend tcp://*:5556) with CURVE on: --curve-secret (the broker's secret certificate) and \
            the two allowlists, directories of public certificates from `skynet keygen`. Only keys in \
            --allow-workers may work and only keys in --allow-coordinators may submit, follow or cancel. \
            The allowlists are read again on SIGHUP and when their directories change.
            """
    )

    @Option(help: "Endpoint for coordinators (a ROUTER socket).")
    var frontend = "tcp://127.0.0.1:5555"

    @Option(help: "Endpoint for workers (a ROUTER socket).")
    var backend = "tcp://127.0.0.1:5556"

    @Option(
        help: ArgumentHelp(
            "The broker's secret certificate (broker.key_secret from `skynet keygen`): CURVE on both ports.",
            valueName: "file"
        )
    )
    var curveSecret: String?

    @Option(help: ArgumentHelp("Public certificates of the workers allowed on the backend.", valueName: "dir"))
    var allowWorkers: String?

    @Option(
        help: ArgumentHelp("Public certificates of the coordinators allowed on the frontend.", valueName: "dir")
    )
    var allowCoordinators: String?

    @Flag(help: "Allow a non-loopback endpoint without CURVE (anyone who reaches it can submit and work).")
    var insecure = false

    @Option(help: "Heartbeat interval (a duration: 1s); peers silent for 3 intervals are dead.")
    var heartbeat = DurationArgument(.seconds(1))

    @Option(help: "Most tasks queued at once; more are rejected.")
    var maxQueued = 10_000_000

    @Option(
        help: "Most live tasks one coordinator may have here; more are rejected with the reason (default: no limit)."
    )
    var maxQueuedPerCoordinator: Int?

    @Option(
        help: ArgumentHelp(
            "auto: lend a worker whose tasks are short (under 5 ms on average) half as many tasks again as its slots (for tasks under 50 µs, what runs in 400 µs: up to 32 a slot); off: never.",
            discussion: """
                A slot that frees up then starts its next task at once instead of waiting a round trip \
                to the broker for it. A lent task waits in the worker for a slot (the wait counts toward \
                its timeout); when long tasks follow short ones, up to half a worker's slots' \
                worth (after tasks under 50 µs, up to 32 a slot) wait behind a long one, once. \
                `skynet worker --prefetch N` holds N more, always.
                """
        )
    )
    var prefetch = PrefetchArgument.auto

    @Option(help: "Most workers registered at once; more are told the broker is at its limit.")
    var maxWorkers = 10_000

    @Option(help: "Most coordinators connected at once; more are told the broker is at its limit.")
    var maxCoordinators = 10_000

    @Option(
        help: ArgumentHelp(
            "Durable mode: keep accepted tasks and results in this journal file.",
            discussion:
                "A SUBMIT is on disk before ACCEPTED and a RESULT before it is forwarded; restarted on the same file (even after kill -9), the broker queues the accepted unfinished tasks again.",
            valueName: "path"
        )
    )
    var journal: String?

    @Option(
        help: ArgumentHelp(
            "HA mode: join a group of brokers on these etcd members (http://host:2379,…); etcd is the journal.",
            discussion:
                "One member leads and serves; the others stand by and tell peers where the leader is. A task is ACCEPTED once a majority of etcd holds it. Give workers and coordinators every member: --broker tcp://a:5556,tcp://b:5556.",
            valueName: "urls"
        )
    )
    var etcd: String?

    @Option(
        help: ArgumentHelp(
            "HA mode, https:// etcd: the CA of etcd's certificates (default: the system's).",
            valueName: "file"
        )
    )
    var etcdCa: String?

    @Option(help: ArgumentHelp("HA mode, https:// etcd: this broker's client certificate (PEM).", valueName: "file"))
    var etcdCert: String?

    @Option(help: ArgumentHelp("HA mode, https:// etcd: the client certificate's key (PEM).", valueName: "file"))
    var etcdKey: String?

    @Option(help: "HA mode: the group's name, so that several pools can share one etcd.")
    var cluster = "skynet"

    @Option(
        help: ArgumentHelp(
            "HA mode: the host or address peers reach this broker at (default: the bound one, or this host's name when bound to *).",
            valueName: "host"
        )
    )
    var advertise: String?

    @Option(
        help:
            "HA mode: the leader's lease (a duration: 5s); a standby takes over within about this long of the leader's loss."
    )
    var leaseTtl = DurationArgument(.seconds(5))

    @Option(help: "Compact the journal once it is this many MiB (and twice its last compacted size).")
    var compactMib = 64

    @Option(help: "On SIGTERM, how long to wait for running tasks' results before stopping (a duration: 10s).")
    var shutdownGrace = DurationArgument(.seconds(10))

    @Option(help: "How long a finished detached job's results are kept (a duration: 24h).")
    var jobRetention = DurationArgument(.seconds(86_400))

    @Flag(
        help: ArgumentHelp(
            "Announce this broker on the local network (a UDP beacon every second), for `skynet worker --discover`.",
            discussion: """
                The beacon carries the endpoints, the broker's public key (with CURVE) and its role; it \
                goes to each interface's broadcast address, or only to this host when the backend is \
                bound to loopback. Listeners trust a key only when they were given it.
                """
        )
    )
    var announce = false

    @Option(help: "With --announce, the UDP port beacons go to.")
    var announcePort: Int = Int(Beacon.defaultPort)

    @OptionGroup var httpOptions: HTTPOptions
    @OptionGroup var polling: ReactorOptions
    @OptionGroup var logging: LoggingOptions

    func check() throws {
        try checkEndpoint(self.frontend, binding: true, flag: "--frontend")
        try checkEndpoint(self.backend, binding: true, flag: "--backend")
        if let problem = Heartbeat.problem(with: self.heartbeat.duration) { throw ValidationError(problem) }
        guard self.maxQueued >= 1 else { throw ValidationError("--max-queued must be at least 1") }
        if let perCoordinator = self.maxQueuedPerCoordinator, perCoordinator < 1 {
            throw ValidationError("--max-queued-per-coordinator must be at least 1")
        }
        guard self.maxWorkers >= 1, self.maxCoordinators >= 1 else {
            throw ValidationError("--max-workers and --max-coordinators must be at least 1")
        }
        guard self.shutdownGrace.duration <= .seconds(3600) else {
            throw ValidationError("--shutdown-grace must be at most 1h")
        }
        guard (1...65535).contains(self.announcePort) else {
            throw ValidationError("--announce-port must be 1 to 65535")
        }
        guard self.compactMib >= 1 else { throw ValidationError("--compact-mib must be at least 1") }
        if let journal = self.journal {
            guard !journal.isEmpty, !journal.hasSuffix("/") else {
                throw ValidationError("--journal must name a file, not '\(journal)'")
            }
        }
        if let etcd = self.etcd {
            guard self.journal == nil else {
                throw ValidationError(
                    "--journal and --etcd are the two durable modes: choose one (--etcd keeps the journal in etcd)"
                )
            }
            _ = try self.etcdEndpoints(etcd)
            for (flag, path) in [
                ("--etcd-ca", self.etcdCa), ("--etcd-cert", self.etcdCert), ("--etcd-key", self.etcdKey),
            ] {
                if let path, access(path, R_OK) != 0 {
                    throw ValidationError("\(flag) \(path): \(String(cString: strerror(errno)))")
                }
            }
            if (self.etcdCert == nil) != (self.etcdKey == nil) {
                throw ValidationError("--etcd-cert and --etcd-key go together (a client certificate and its key)")
            }
            let tlsGiven = self.etcdCa != nil || self.etcdCert != nil
            if tlsGiven, !etcd.contains("https://") {
                throw ValidationError(
                    "--etcd-ca, --etcd-cert and --etcd-key are for https:// etcd endpoints: use https://host:2379"
                )
            }
            guard !self.cluster.isEmpty, !self.cluster.contains("/") else {
                throw ValidationError("--cluster must be a name without '/', not '\(self.cluster)'")
            }
            guard self.leaseTtl.duration >= .seconds(2), self.leaseTtl.duration <= .seconds(60) else {
                throw ValidationError("--lease-ttl must be from 2s to 60s")
            }
            _ = try self.group()
        }
        switch (self.curveSecret, self.allowWorkers, self.allowCoordinators) {
        case (nil, nil, nil), (.some, .some, .some): break
        case (.some, _, _):
            throw ValidationError(
                "--curve-secret needs --allow-workers and --allow-coordinators (directories of public certificates)"
            )
        default:
            throw ValidationError(
                "--allow-workers and --allow-coordinators need --curve-secret (the broker's secret certificate)"
            )
        }
        if self.curveSecret == nil, !self.insecure {
            for endpoint in [self.frontend, self.backend] where !Self.isLoopback(endpoint) {
                throw ValidationError(
                    "\(endpoint) is not a loopback address: turn CURVE on (--curve-secret, --allow-workers, --allow-coordinators; see `skynet keygen --help`), or pass --insecure to let anyone who reaches it submit and work"
                )
            }
        }
    }

    func run() async throws {
        ParentWatch.startIfAsked()
        let logger = self.logging.logger("skynet.broker", default: .info)
        // One descriptor per connected peer: the usual soft limit (1,024) is too low for a broker.
        let descriptors = POSIX.raiseDescriptorLimit()
        if descriptors < 4096 {
            logger.warning(
                "this process may open only \(descriptors) files (ulimit -n): that bounds workers, coordinators and HTTP clients together; raise the hard limit (LimitNOFILE= in systemd, ulimits in compose)"
            )
        }
        let board = StatusBoard()
        var configuration = BrokerConfiguration(
            frontend: self.frontend,
            backend: self.backend,
            heartbeat: Heartbeat(interval: self.heartbeat.duration),
            maxQueuedTasks: self.maxQueued,
            journalPath: self.journal,
            compactionBytes: self.compactMib << 20,
            shutdownGrace: self.shutdownGrace.duration,
            jobRetention: self.jobRetention.duration,
            maxQueuedPerCoordinator: self.maxQueuedPerCoordinator ?? .max,
            maxWorkers: self.maxWorkers,
            maxCoordinators: self.maxCoordinators,
            security: try self.loadSecurity()
        )
        configuration.group = try self.group()
        configuration.prefetchShortTasks = self.prefetch == .auto
        // SIGTERM and SIGINT are trapped before the broker says it listens: a script that reads the
        // listening line and signals at once gets a graceful stop, not the default action's death.
        let stopSignals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        try await withReactor(name: "broker", idleSpin: self.polling.idleSpin.duration) { reactor in
            let broker = Broker(configuration: configuration, reactor: reactor, logger: logger)
            do {
                let endpoints = try await broker.start()
                if configuration.security == nil {
                    for endpoint in [endpoints.frontend, endpoints.backend] where !Self.isLoopback(endpoint) {
                        logger.warning(
                            "listening on a non-loopback address without CURVE (--insecure): anyone who can reach it can submit and work",
                            metadata: ["endpoint": "\(endpoint)"]
                        )
                    }
                }
                // One machine-readable line on standard output: where the broker listens (the real
                // ports when bound to *), for scripts and tests.
                // Not fatal when it cannot be written (standard output closed): the broker serves.
                do {
                    try Terminal.write(ListeningLine(endpoints, epoch: broker.epoch).json() + "\n")
                } catch {
                    logger.warning("the listening line not written", metadata: ["reason": "\(error)"])
                }
            } catch {
                throw CLIError("cannot start the broker: \(error)")
            }
            let announcer = try await self.announcer(broker: broker, configuration: configuration, logger: logger)
            // An HA broker's beacon follows its role (it takes the lead, or loses it).
            let inGroup = configuration.group != nil
            let roles = Task {
                guard let announcer, inGroup else { return }
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    announcer.update(role: await broker.role)
                }
            }
            defer {
                roles.cancel()
                announcer?.stop()
            }
            var services: [any Service] = [broker]
            if let http = self.httpOptions.service(
                board: board,
                descriptors: descriptors,
                logger: logger,
                onListening: { url in
                    // A second machine-readable line: where the dashboard is.
                    do {
                        try Terminal.write("{\"http\":\"\(url)\"}\n")
                    } catch {
                        logger.warning("the dashboard's address not written", metadata: ["reason": "\(error)"])
                    }
                    logger.info("dashboard", metadata: ["url": "\(url)"])
                }
            ) {
                await broker.observe(every: .milliseconds(250)) { board.publish($0) }
                services.append(http)
            }
            let group = ServiceGroup(services: services, logger: logger)
            let stops = Task {
                for await signal in stopSignals {
                    logger.info("graceful stop", metadata: ["signal": "\(signal)"])
                    await group.triggerGracefulShutdown()
                }
            }
            // SIGHUP reads the allowlists again.
            let hangups = Task {
                for await _ in await UnixSignalsSequence(trapping: .sighup) { await broker.reloadAllowlists() }
            }
            defer {
                stops.cancel()
                hangups.cancel()
            }
            do {
                try await group.run()
            } catch let error as JournalError where error.code == .diskFailure {
                // Crash-only: the broker stopped at once; what is on disk is consistent.
                Terminal.writeAll(
                    STDERR_FILENO,
                    "skynet broker: \(error.message); stopped (restart it on the same journal)\n"
                )
                throw ExitCode(74)
            } catch let error where !(error is CLIError) && !(error is ExitCode) && !(error is SecurityError) {
                // The HTTP endpoint's errors (its port in use) come from its server library.
                let hint = self.httpOptions.http.map { " (is --http \($0) free? port 0 takes any)" } ?? ""
                throw CLIError("the broker stopped: \(error)\(hint)")
            }
        }
    }

    /// With --announce, the beacon's sender.
    private func announcer(
        broker: Broker,
        configuration: BrokerConfiguration,
        logger: Logger
    ) async throws -> BeaconAnnouncer? {
        guard self.announce, let endpoints = await broker.endpoints else { return nil }
        let beacon = Beacon(
            role: await broker.role,
            frontend: configuration.group?.advertisedFrontend ?? endpoints.frontend,
            backend: configuration.group?.advertisedBackend ?? endpoints.backend,
            key: configuration.security?.certificate.publicKey
        )
        let announcer: BeaconAnnouncer
        do {
            announcer = try BeaconAnnouncer(
                beacon,
                port: UInt16(self.announcePort),
                loopbackOnly: Self.isLoopback(endpoints.backend),
                logger: logger
            )
        } catch {
            throw CLIError("--announce: \(error)")
        }
        logger.info(
            "announcing on the local network",
            metadata: ["udp.port": "\(self.announcePort)", "beacon": "\(beacon.text)"]
        )
        return announcer
    }

    /// etcd's members from `--etcd`.
    private func etcdEndpoints(_ list: String) throws -> [String] {
        let endpoints = BrokerList(list).endpoints.filter { !$0.isEmpty }
        guard !endpoints.isEmpty else { throw ValidationError("--etcd needs at least one http://host:port") }
        for endpoint in endpoints {
            do throws(EtcdError) {
                _ = try EtcdClient.parse(endpoint)
            } catch {
                throw ValidationError("--etcd: \(error.message)")
            }
        }
        return endpoints
    }

    /// The HA group from the flags (nil without --etcd).
    private func group() throws -> BrokerGroup? {
        guard let etcd = self.etcd else { return nil }
        return BrokerGroup(
            etcd: try self.etcdEndpoints(etcd),
            cluster: self.cluster,
            advertisedFrontend: try Self.advertised(self.frontend, host: self.advertise, flag: "--frontend"),
            advertisedBackend: try Self.advertised(self.backend, host: self.advertise, flag: "--backend"),
            leaseTTL: self.leaseTtl.duration,
            tls: self.etcdCa == nil && self.etcdCert == nil
                ? nil : EtcdTLS(caFile: self.etcdCa, certificateFile: self.etcdCert, keyFile: self.etcdKey)
        )
    }

    /// Where peers reach a bound endpoint: `tcp://HOST:PORT` with the advertised host (or the bound
    /// one, or this host's name when bound to every interface).
    static func advertised(_ bound: String, host: String?, flag: String) throws -> String {
        guard bound.hasPrefix("tcp://"), let colon = bound.lastIndex(of: ":"),
            let port = Int(bound[bound.index(after: colon)...]), port > 0
        else {
            throw ValidationError(
                "\(flag) \(bound): HA mode needs tcp://HOST:PORT with a fixed port (its peers are told where it is)"
            )
        }
        if let host, host.allSatisfy({ $0 == " " }) || host.contains("/") {
            throw ValidationError("--advertise needs a host or address peers reach this broker at, not '\(host)'")
        }
        let boundHost = String(bound[bound.index(bound.startIndex, offsetBy: 6)..<colon])
        var name = host ?? boundHost
        if host == nil, boundHost == "*" || boundHost == "0.0.0.0" { name = WorkerFigures.hostName }
        return "tcp://\(name):\(port)"
    }

    /// The broker's CURVE setup from the flags (nil without --curve-secret).
    private func loadSecurity() throws -> BrokerSecurity? {
        guard let secret = self.curveSecret, let workers = self.allowWorkers, let coordinators = self.allowCoordinators
        else { return nil }
        do {
            return try BrokerSecurity.load(
                secretPath: secret,
                workersDirectory: workers,
                coordinatorsDirectory: coordinators
            )
        } catch {
            throw CLIError("\(error)")
        }
    }

    static func isLoopback(_ endpoint: String) -> Bool {
        endpoint.hasPrefix("tcp://127.") || endpoint.hasPrefix("tcp://[::1]") || endpoint.hasPrefix("tcp://localhost")
            || endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("inproc://")
    }
}
