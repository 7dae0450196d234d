import SkyNetCore
internal import FoundationEssentials
public import Logging
import ServiceLifecycle
import UnixSignals
import ZeroMQ

extension Worker {
    /// The whole `main` of a worker executable for your own scanners: builds a reactor, runs a
    /// worker as a service until SIGTERM or SIGINT, then drains (finishes running scans, up to the
    /// configuration's drain timeout) and returns.
    ///
    /// ```swift
    /// @main struct PrimeWorker {
    ///     static func main() async throws {
    ///         try await Worker.serve(scanners: [CountPrimes()])
    ///     }
    /// }
    /// ```
    /// - Parameters:
    ///   - scanners: the kinds this worker runs.
    ///   - configuration: where and how; by default ``WorkerConfiguration/fromEnvironment()``.
    ///   - logger: where it logs (default: `skynet.worker`, info, on standard error).
    /// - Throws: ``WorkerConfiguration/EnvironmentError`` for a bad setting, ``SecurityError`` when
    ///   the broker refuses this worker.
    public static func serve(
        scanners: [any TaskScanner],
        configuration: WorkerConfiguration? = nil,
        logger: Logger? = nil
    ) async throws {
        let configuration = try configuration ?? WorkerConfiguration.fromEnvironment()
        let logger = logger ?? Logger(label: "skynet.worker") { StreamLogHandler.standardError(label: $0) }
        try await withReactor(name: "worker") { reactor in
            let worker = Worker(configuration: configuration, reactor: reactor, logger: logger, scanners: scanners)
            let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
            try await group.run()
        }
    }
}

extension WorkerConfiguration {
    /// A setting in the environment that is not valid.
    public struct EnvironmentError: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// A configuration from the environment, as a container sets it: `SKYNET_BROKER` (the backend,
    /// default `tcp://127.0.0.1:5556`), `SKYNET_WORKER_NAME` (default host-pid), `SKYNET_SLOTS`
    /// (default 4), and CURVE with `SKYNET_CURVE_SECRET` and `SKYNET_BROKER_KEY` (both or neither).
    /// - Parameter environment: the variables (nil: this process's).
    /// - Throws: ``EnvironmentError`` naming the variable that is wrong.
    public static func fromEnvironment(_ environment: [String: String]? = nil) throws -> WorkerConfiguration {
        let environment = environment ?? ProcessInfo.processInfo.environment
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        var configuration = WorkerConfiguration(
            broker: value("SKYNET_BROKER") ?? "tcp://127.0.0.1:5556",
            name: value("SKYNET_WORKER_NAME")
                ?? "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
        )
        if let slots = value("SKYNET_SLOTS") {
            guard let count = Int(slots), (1...1024).contains(count) else {
                throw EnvironmentError(description: "SKYNET_SLOTS must be 1 to 1024, not \(slots)")
            }
            configuration.slots = count
        }
        switch (value("SKYNET_CURVE_SECRET"), value("SKYNET_BROKER_KEY")) {
        case (nil, nil): break
        case (let secret?, let brokerKey?):
            configuration.security = try ClientSecurity.load(secretPath: secret, brokerKeyPath: brokerKey)
        case (.some, nil):
            throw EnvironmentError(
                description: "SKYNET_CURVE_SECRET needs SKYNET_BROKER_KEY (the broker's public certificate)"
            )
        case (nil, .some):
            throw EnvironmentError(
                description: "SKYNET_BROKER_KEY needs SKYNET_CURVE_SECRET (this worker's secret certificate)"
            )
        }
        return configuration
    }
}
