import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SkyNet
import SkyNetCLI
import ZeroMQ
import UnixSignals

struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Run a worker: a ScanSystem with N slots that takes tasks from a broker.",
        discussion: """
            Reconnects with backoff when the broker goes away. On SIGTERM or SIGINT it stops taking tasks, \
            finishes the running ones (up to --drain-timeout), then exits.
            """
    )

    @Option(help: "The broker's backend endpoint.")
    var broker = "tcp://127.0.0.1:5556"

    @Option(help: "Scans run at once.")
    var slots = 4

    @Option(help: "The name results carry (default: host-pid).")
    var name: String?

    @Option(help: "Heartbeat interval (a duration: 1s); a broker silent for 3 intervals is lost.")
    var heartbeat = DurationArgument(.seconds(1))

    @Option(help: "On SIGTERM, how long to let running scans finish before cancelling them (a duration: 30s).")
    var drainTimeout = DurationArgument(.seconds(30))

    @OptionGroup var polling: ReactorOptions
    @OptionGroup var curve: CurveOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        try checkEndpoint(self.broker, binding: false, flag: "--broker")
        guard (1...1024).contains(self.slots) else { throw ValidationError("--slots must be 1 to 1024") }
        if let name, name.isEmpty || name.utf8.count > ProtocolLimits.nameLength {
            throw ValidationError("--name must be 1 to \(ProtocolLimits.nameLength) bytes")
        }
        guard self.heartbeat.duration >= .milliseconds(50) else {
            throw ValidationError("--heartbeat must be at least 50ms")
        }
    }

    func run() async throws {
        let logger = self.logging.logger("skynet.worker", default: .info)
        let name = self.name ?? "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
        let configuration = WorkerConfiguration(
            broker: self.broker,
            name: name,
            slots: self.slots,
            heartbeat: Heartbeat(interval: self.heartbeat.duration),
            drainTimeout: self.drainTimeout.duration,
            security: try self.curve.load()
        )
        try await withReactor(name: "worker", idleSpin: self.polling.idleSpin.duration) { reactor in
            let worker = Worker(configuration: configuration, reactor: reactor, logger: logger, scanners: cliScanners)
            let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
            try await group.run()
            let system = worker.system
            let tasks = await worker.tasksReceived
            let peak = await system.peakRunning
            logger.info(
                "worker stopped",
                metadata: ["tasks": "\(tasks)", "peak.running": "\(peak)", "slots": "\(system.slots)"]
            )
        }
    }
}
