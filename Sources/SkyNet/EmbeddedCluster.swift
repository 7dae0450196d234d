import SkyNetCore
public import Logging
public import ZeroMQ

/// A broker and workers in this process, on loopback with ephemeral ports: the embedded default
/// behind `skynet demo`, also handy in tests, examples and benchmarks.
///
/// ```swift
/// try await withReactor { reactor in
///     try await EmbeddedCluster.run(workers: 2, scanners: [MyScanner()], reactor: reactor, logger: logger) {
///         endpoints in
///         // connect a Coordinator to endpoints.frontend
///     }
/// }
/// ```
public enum EmbeddedCluster {
    /// The name of worker `index`: worker-a, worker-b, …, worker-z, worker-27, ….
    public static func workerName(_ index: Int) -> String {
        index < 26 ? "worker-\(Character(UnicodeScalar(UInt8(97 + index))))" : "worker-\(index + 1)"
    }

    /// Starts a broker and `workers` workers with `slots` slots each, runs `body` with the broker's
    /// endpoints, then stops them all (workers first, so none of them tries to reconnect).
    /// - Parameters:
    ///   - workers: how many workers (each a ``Worker`` with its own ``ScanSystem``).
    ///   - slots: slots per worker (default 4).
    ///   - scanners: the task kinds every worker runs.
    ///   - reactor: the reactor every part runs on.
    ///   - logger: where the broker and workers log.
    ///   - heartbeat: the heartbeat interval and liveness for all of them.
    ///   - keys: CURVE on, with these keys (the broker's and the workers'; connect a coordinator with
    ///     `keys.coordinator`); nil for plain text.
    ///   - onStatus: called with the broker's status every 250 ms (``Broker/observe(every:_:)``), if given.
    ///   - body: runs while the cluster serves, with its bound endpoints.
    /// - Returns: what `body` returns.
    /// - Throws: what `body` throws, or the broker's error when it cannot bind.
    public static func run<R: Sendable>(
        workers: Int,
        slots: Int = 4,
        scanners: [any TaskScanner],
        reactor: Reactor,
        logger: Logger,
        heartbeat: Heartbeat = Heartbeat(),
        keys: EphemeralKeys? = nil,
        onStatus: (@Sendable (BrokerStatus) -> Void)? = nil,
        _ body: @Sendable (Broker.Endpoints) async throws -> R
    ) async throws -> R {
        let broker = Broker(
            configuration: BrokerConfiguration(
                frontend: "tcp://127.0.0.1:*",
                backend: "tcp://127.0.0.1:*",
                heartbeat: heartbeat,
                security: keys?.broker
            ),
            reactor: reactor,
            logger: logger
        )
        let endpoints = try await broker.start()
        if let onStatus { await broker.observe(every: .milliseconds(250), onStatus) }
        let members = (0..<workers).map { index in
            Worker(
                configuration: WorkerConfiguration(
                    broker: endpoints.backend,
                    name: self.workerName(index),
                    slots: slots,
                    heartbeat: heartbeat,
                    security: keys?.worker
                ),
                reactor: reactor,
                logger: logger,
                scanners: scanners
            )
        }
        // Workers stop before the broker, so none of them sees the broker go and tries to reconnect.
        return try await withThrowingTaskGroup(of: Void.self) { brokerGroup in
            brokerGroup.addTask { try await broker.run() }
            defer { brokerGroup.cancelAll() }
            return try await withThrowingTaskGroup(of: Void.self) { workerGroup in
                for worker in members { workerGroup.addTask { try await worker.run() } }
                do {
                    let result = try await body(endpoints)
                    workerGroup.cancelAll()
                    try? await workerGroup.waitForAll()
                    return result
                } catch {
                    workerGroup.cancelAll()
                    try? await workerGroup.waitForAll()
                    throw error
                }
            }
        }
    }
}
