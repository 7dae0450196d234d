import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SkyNet
import SkyNetCLI
import ZeroMQ
import Synchronization
import UnixSignals

struct WorkerCommand: AsyncParsableCommand, CheckedArguments {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Run a worker: a ScanSystem with N slots that takes tasks from a broker.",
        discussion: """
            Reconnects with backoff when the broker goes away. On SIGTERM or SIGINT it stops taking tasks, \
            finishes the running ones (up to --drain-timeout), then exits.

            With --allow-command PATH (repeatable) it also runs commands (the exec kind, `skynet submit --exec`), \
            but only those programs: each in its own session with a clean environment, in a fresh directory. \
            Anyone who can submit to the broker can run them, so it refuses to start without CURVE \
            (--curve-secret/--broker-key) unless given --insecure. An allowed program can read what its \
            user can read and write where it may: a worker running as root runs commands as --run-as USER \
            (an unprivileged account such as nobody, which cannot read this worker's key) and refuses to \
            start without it, unless told --run-as root. Variables that make a program load other code \
            (LD_PRELOAD, BASH_ENV, PATH, ...) are refused unless --allow-env names them. Each command runs \
            under a guard process, so its whole process group ends with the worker, even on kill -9.
            """
    )

    @Option(
        help: ArgumentHelp(
            "The broker's backend endpoint; for an HA group, every member's, separated by commas.",
            discussion: "Also from SKYNET_BROKER."
        )
    )
    var broker = defaultBroker("tcp://127.0.0.1:5556")

    @Option(help: "Scans run at once.")
    var slots = 4

    @Option(
        help: ArgumentHelp(
            "Tasks held beyond --slots, always, each waiting for a slot (a number; 0: none). The broker lends more on its own while tasks are short: skynet broker --prefetch auto|off.",
            discussion: """
                The broker's credit for this worker becomes slots + prefetch, so a freed slot starts \
                the next task at once instead of waiting a round trip to the broker for it (worth it \
                for tasks of a few milliseconds). Held tasks are requeued like running ones if the \
                worker is lost; the time one waits for a slot counts toward its --timeout.
                """
        )
    )
    var prefetch = 0

    @Option(help: "The name results carry (default: host-pid).")
    var name: String?

    @Option(help: "Heartbeat interval (a duration: 1s); a broker silent for 3 intervals is lost.")
    var heartbeat = DurationArgument(.seconds(1))

    @Option(help: "On SIGTERM, how long to let running scans finish before cancelling them (a duration: 30s).")
    var drainTimeout = DurationArgument(.seconds(30))

    @Option(
        help: ArgumentHelp(
            "Run commands of this program (an absolute path; repeatable): announces the exec kind.",
            valueName: "path"
        )
    )
    var allowCommand: [String] = []

    @Flag(
        help: """
            Allow --allow-command without CURVE (anyone who reaches the broker runs those programs), \
            and --discover of a broker off this host without CURVE.
            """
    )
    var insecure = false

    @Option(help: "When a command must stop (timeout, cancel, drain), TERM its process group, then KILL after this.")
    var killGrace = DurationArgument(.seconds(2))

    @Option(
        help: ArgumentHelp(
            "Run commands as this user (needed when the worker runs as root; root only when named).",
            valueName: "user"
        )
    )
    var runAs: String?

    @Option(
        help: ArgumentHelp(
            "Let commands be given this variable although it is refused by default (LD_*, PATH, ...; repeatable).",
            valueName: "name"
        )
    )
    var allowEnv: [String] = []

    @OptionGroup var discovery: DiscoveryOptions
    @OptionGroup var polling: ReactorOptions
    @OptionGroup var curve: CurveOptions
    @OptionGroup var logging: LoggingOptions

    func check() throws {
        try checkBrokers(self.broker, flag: "--broker")
        for name in self.allowEnv where name.isEmpty || name.contains("=") {
            throw ValidationError("--allow-env takes a variable name, not '\(name)'")
        }
        if (self.runAs != nil || !self.allowEnv.isEmpty) && self.allowCommand.isEmpty {
            throw ValidationError("--run-as and --allow-env are for commands: give --allow-command PATH too")
        }
        guard (1...1024).contains(self.slots) else { throw ValidationError("--slots must be 1 to 1024") }
        guard (0...1024).contains(self.prefetch) else { throw ValidationError("--prefetch must be 0 to 1024") }
        if let name, name.isEmpty || name.utf8.count > ProtocolLimits.nameLength {
            throw ValidationError("--name must be 1 to \(ProtocolLimits.nameLength) bytes")
        }
        if let problem = Heartbeat.problem(with: self.heartbeat.duration) { throw ValidationError(problem) }
    }

    func run() async throws {
        ParentWatch.startIfAsked()
        let logger = self.logging.logger("skynet.worker", default: .info)
        var scanners = cliScanners
        // With --discover the broker's key comes with its beacon (one of --broker-key's).
        let security = self.discovery.discover ? nil : try self.curve.load()
        if !self.allowCommand.isEmpty {
            if self.curve.curveSecretPath == nil && !self.insecure {
                throw CLIError(
                    "--allow-command lets anyone who reaches the broker run those programs: use CURVE (--curve-secret and --broker-key) or pass --insecure"
                )
            }
            let user: ExecUser?
            do {
                user = try self.runAs.map { name throws(ScannerError) in try ExecUser(named: name) }
                let scanner = try ExecScanner(
                    allowing: self.allowCommand,
                    killGrace: self.killGrace.duration,
                    runAs: user,
                    allowedEnvironment: Set(self.allowEnv),
                    guardCommand: ExecGuardCommand.command
                )
                if user == nil && ExecUser.processIsRoot {
                    throw ScannerError(
                        "this worker runs as root, so an allowed program could read its key and state: give --run-as USER (an unprivileged account, e.g. --run-as nobody), or --run-as root to accept that"
                    )
                }
                scanners.append(scanner)
            } catch {
                throw CLIError("\(error)")
            }
            if user?.isRoot == true {
                logger.warning("commands run as root (--run-as root): an allowed program can read this worker's key")
            }
            logger.notice(
                "commands allowed",
                metadata: [
                    "programs": "\(self.allowCommand.joined(separator: " "))",
                    "run.as": "\(user?.name ?? ProcessInfo.processInfo.userName)",
                ]
            )
        }
        let name = self.name ?? "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
        var configuration = WorkerConfiguration(
            broker: self.broker,
            name: name,
            slots: self.slots,
            heartbeat: Heartbeat(interval: self.heartbeat.duration),
            drainTimeout: self.drainTimeout.duration,
            security: security,
            prefetch: self.prefetch
        )
        let beacons: BeaconListener?
        if self.discovery.discover {
            logger.info("listening for a broker's beacon", metadata: ["udp.port": "\(self.discovery.discoverPort)"])
            let found = try await self.discovery.find(
                curve: self.curve,
                insecure: self.insecure,
                workers: true,
                waitForever: true,
                logger: logger
            )
            beacons = found.listener
            configuration.broker = found.endpoints
            configuration.security = found.security
        } else {
            beacons = nil
        }
        defer { beacons?.stop() }
        let stopSignals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        try await withReactor(name: "worker", idleSpin: self.polling.idleSpin.duration) { reactor in
            // The group running now, and whether a signal asked the process to stop.
            let current = Mutex<(group: ServiceGroup?, signalled: Bool)>((nil, false))
            let stops = Task {
                for await signal in stopSignals {
                    logger.info("graceful stop", metadata: ["signal": "\(signal)"])
                    let group = current.withLock { state -> ServiceGroup? in
                        state.signalled = true
                        return state.group
                    }
                    await group?.triggerGracefulShutdown()
                }
            }
            defer { stops.cancel() }
            // With --discover: a worker per broker followed. When the broker it follows stops
            // announcing and another is heard, this one drains and a new one starts on the other.
            while true {
                let worker = Worker(configuration: configuration, reactor: reactor, logger: logger, scanners: scanners)
                let group = ServiceGroup(services: [worker], logger: logger)
                guard
                    current.withLock({ state -> Bool in
                        state.group = group
                        return !state.signalled
                    })
                else { return }
                let next = Mutex<(endpoints: String, key: String?)?>(nil)
                let follows = Task { [configuration] in
                    guard let beacons else { return }
                    let followed = Set(configuration.broker.split(separator: ",").map(String.init))
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .milliseconds(250))
                        let heard = beacons.brokers()
                        guard !heard.contains(where: { followed.contains($0.backend) }),
                            let found = HeardBroker.follow(heard, workers: true)
                        else { continue }
                        logger.notice(
                            "following the broker at \(found.endpoints): the one at \(configuration.broker) stopped announcing"
                        )
                        next.withLock { $0 = found }
                        await group.triggerGracefulShutdown()
                        return
                    }
                }
                defer { follows.cancel() }
                try await group.run()
                let system = worker.system
                let tasks = await worker.tasksReceived
                let peak = await system.peakRunning
                logger.info(
                    "worker stopped",
                    metadata: ["tasks": "\(tasks)", "peak.running": "\(peak)", "slots": "\(system.slots)"]
                )
                guard !current.withLock({ $0.signalled }), let found = next.withLock({ $0 }) else { return }
                configuration.broker = found.endpoints
                configuration.security = try DiscoveryOptions.security(self.curve, brokerKey: found.key)
            }
        }
    }
}
