public import Logging
public import ZeroMQ

/// Runs one job end to end and prints it: the wiring behind `skynet submit` and `skynet demo`,
/// callable without parsing a command line.
public struct JobRunner: Sendable {
    /// Where output goes: standard output lines, and the terminal's progress line (nil when not a TTY).
    public struct Output: Sendable {
        public var write: @Sendable (String) -> Void
        public var progress: (@Sendable (String?) -> Void)?

        public init(write: @escaping @Sendable (String) -> Void, progress: (@Sendable (String?) -> Void)? = nil) {
            self.write = write
            self.progress = progress
        }
    }

    public var configuration: CoordinatorConfiguration
    public var format: JobReporter.Format
    public var output: Output

    public init(configuration: CoordinatorConfiguration, format: JobReporter.Format, output: Output) {
        self.configuration = configuration
        self.format = format
        self.output = output
    }

    /// Submits `tasks`, prints every final result as it arrives and the summary at the end.
    /// - Parameter interrupts: the first element (a reason, e.g. "interrupted") cancels the job: its
    ///   queued and running tasks are cancelled and the partial summary is printed.
    /// - Returns: the job's summary (check ``JobSummary/succeeded``).
    /// - Throws: ``CoordinatorError`` when the broker cannot be reached.
    public func run(
        _ tasks: [ScanTask],
        reactor: Reactor,
        logger: Logger,
        interrupts: AsyncStream<String>? = nil
    ) async throws -> JobSummary {
        let format = self.format
        let output = self.output
        let summary = try await Coordinator.withCoordinator(
            configuration: self.configuration,
            reactor: reactor,
            logger: logger
        ) { coordinator in
            let watcher = Task {
                guard let interrupts else { return }
                for await reason in interrupts {
                    await coordinator.cancel(reason: reason)
                    return
                }
            }
            defer { watcher.cancel() }
            var reporter = JobReporter(format: format, total: tasks.count)
            var lastDraw = ContinuousClock.now - .seconds(1)
            for try await batch in try await coordinator.submit(tasks) {
                let text = reporter.render(batch)
                if let progress = output.progress {
                    if !text.isEmpty { progress(nil) }
                    if !text.isEmpty { output.write(text) }
                    let now = ContinuousClock.now
                    if now - lastDraw >= .milliseconds(100) {
                        lastDraw = now
                        progress(reporter.progressLine(now: now))
                    }
                } else if !text.isEmpty {
                    output.write(text)
                }
            }
            output.progress?(nil)
            let summary = await coordinator.summary
            output.write(reporter.summary(summary) + "\n")
            return summary
        }
        return summary
    }
}

/// A broker and workers in this process, on loopback with ephemeral ports: the embedded default
/// behind `skynet demo`, also handy in tests and benchmarks.
public enum EmbeddedCluster {
    /// The name of worker `index`: worker-a, worker-b, …, worker-z, worker-27, ….
    public static func workerName(_ index: Int) -> String {
        index < 26 ? "worker-\(Character(UnicodeScalar(UInt8(97 + index))))" : "worker-\(index + 1)"
    }

    /// Starts a broker and `workers` workers with `slots` slots each, runs `body` with the broker's
    /// endpoints, then stops them all.
    public static func run<R: Sendable>(
        workers: Int,
        slots: Int,
        reactor: Reactor,
        logger: Logger,
        heartbeat: Heartbeat = Heartbeat(),
        _ body: @Sendable (Broker.Endpoints) async throws -> R
    ) async throws -> R {
        let broker = Broker(
            configuration: BrokerConfiguration(
                frontend: "tcp://127.0.0.1:*",
                backend: "tcp://127.0.0.1:*",
                heartbeat: heartbeat
            ),
            reactor: reactor,
            logger: logger
        )
        let endpoints = try await broker.start()
        let members = (0..<workers).map { index in
            Worker(
                configuration: WorkerConfiguration(
                    broker: endpoints.backend,
                    name: self.workerName(index),
                    slots: slots,
                    heartbeat: heartbeat
                ),
                reactor: reactor,
                logger: logger
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
