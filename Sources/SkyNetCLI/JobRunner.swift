public import SkyNet
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
    /// The scanners that run local retries (the same kinds as the workers').
    public var scanners: [any TaskScanner]
    public var format: JobReporter.Format
    public var output: Output

    public init(
        configuration: CoordinatorConfiguration,
        scanners: [any TaskScanner],
        format: JobReporter.Format,
        output: Output
    ) {
        self.configuration = configuration
        self.scanners = scanners
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
            logger: logger,
            scanners: self.scanners
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
