import ArgumentParser
import Glibc
import Logging
import ServiceLifecycle
import SkyNet
import SkyNetCLI
import SkyNetHTTP
import ZeroMQ

struct DemoCommand: AsyncParsableCommand, CheckedArguments {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run SkyNet's main job on an embedded default: a broker, workers and a coordinator in one process.",
        discussion: """
            Everything talks real ZeroMQ over TCP on loopback. By default 20 sectors with 1 s of work each run on \
            2 workers with 4 slots; every 10th scan attempt fails and is re-run on the coordinator's local ScanSystem.
            """
    )

    @Option(help: "Scan sectors 1...N.")
    var sectors = 20

    @Option(help: "Worker ScanSystems to start.")
    var workers = 2

    @Option(help: "Slots per worker.")
    var slots = 4

    @Option(help: "How long each sector scan takes (250ms, 1s, 2m…).")
    var work = DurationArgument(.seconds(1))

    @Option(help: "Every Nth scan attempt in this process fails (0: never).")
    var failEvery = 10

    @Flag(help: "Print one JSON object per final result, then a summary object.")
    var json = false

    @Flag(help: "CURVE on: fresh keys for the broker, the workers and the coordinator (removed afterwards).")
    var curve = false

    @Option(
        help: ArgumentHelp(
            "Serve the dashboard on this address (port 0: any free port); \"off\" for none.",
            valueName: "host:port"
        )
    )
    var http = "127.0.0.1:0"

    @OptionGroup var polling: ReactorOptions
    @OptionGroup var logging: LoggingOptions

    func check() throws {
        guard (1...1_000_000).contains(self.sectors) else { throw ValidationError("--sectors must be 1 to 1000000") }
        guard (1...100).contains(self.workers) else { throw ValidationError("--workers must be 1 to 100") }
        guard (1...1024).contains(self.slots) else { throw ValidationError("--slots must be 1 to 1024") }
        guard self.failEvery >= 0 else { throw ValidationError("--fail-every must be 0 or more") }
        if self.http != "off" { try HTTPOptions.check(self.http, token: nil) }
    }

    func run() async throws {
        let logger = self.logging.logger("skynet.demo", default: .warning)
        let tasks = (1...self.sectors).map { ScanTask.sector($0, work: self.work.duration, failEvery: self.failEvery) }
        let (workers, slots, json) = (self.workers, self.slots, self.json)
        let failNote: String
        switch self.failEvery {
        case 0: failNote = "no failures"
        case 1: failNote = "every scan attempt fails"
        default: failNote = "every \(self.failEvery)\(ordinalSuffix(self.failEvery)) scan attempt fails"
        }
        let interrupts = Interrupts()
        let interruptStream = interrupts.stream
        let interrupted = interrupts.check
        let keys = self.curve ? try EphemeralKeys.make() : nil
        defer { keys?.remove() }
        let curveNote = keys.map { " CURVE on (broker key \($0.broker.certificate.fingerprint)…)." } ?? ""
        // The dashboard: on its own threads, fed by the embedded broker every 250 ms.
        let board = StatusBoard()
        let interactive = isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0 && !json
        let (urls, urlSink) = AsyncStream.makeStream(of: String.self)
        let dashboard =
            self.http == "off"
            ? nil
            : HTTPOptions.service(self.http, token: nil, board: board, logger: logger) { url in
                urlSink.yield(url)
                urlSink.finish()
            }
        // In a service group of its own, so that it stops gracefully (a cancelled server logs errors).
        let serverGroup = dashboard.map {
            ServiceGroup(services: [$0], gracefulShutdownSignals: [], cancellationSignals: [], logger: logger)
        }
        let server = Task {
            defer { urlSink.finish() }  // a server that cannot start ends the wait for its URL
            try await serverGroup?.run()
        }
        var url: String?
        if dashboard != nil {
            var iterator = urls.makeAsyncIterator()
            url = await iterator.next()
            guard let url else {
                let reason = await server.result.failure.map { "\($0)" } ?? "it stopped"
                throw CLIError(
                    "cannot serve the dashboard on \(self.http): \(reason) (try --http 127.0.0.1:0, or --http off)"
                )
            }
            if json { Terminal.writeAll(STDERR_FILENO, "Dashboard: \(url)\n") }
        }
        let dashboardNote = url.map { " Dashboard: \($0)" } ?? ""
        let onStatus: (@Sendable (BrokerStatus) -> Void)? =
            dashboard == nil ? nil : { @Sendable status in board.publish(status) }
        let running = Task {
            try await withReactor(name: "demo", idleSpin: self.polling.idleSpin.duration) { reactor in
                try await EmbeddedCluster.run(
                    workers: workers,
                    slots: slots,
                    scanners: cliScanners,
                    reactor: reactor,
                    logger: logger,
                    keys: keys,
                    onStatus: onStatus
                ) {
                    endpoints in
                    if !json {
                        try Terminal.write(
                            "SkyNet demo: broker on \(endpoints.frontend) (workers on \(endpoints.backend)), "
                                + "\(workers) workers × \(slots) slots, \(tasks.count) sectors of "
                                + "\(DurationParser.format(self.work.duration)) each, \(failNote); failures re-run locally.\(curveNote)\(dashboardNote)\n"
                        )
                    }
                    if interactive && !dashboardNote.isEmpty {
                        // On a terminal, time to open the page before the scan starts.
                        try Terminal.write("Open the dashboard, then press Enter to start the scan.\n")
                        guard await waitForEnter(interrupted) else { return JobSummary() }
                    }
                    let runner = JobRunner(
                        configuration: CoordinatorConfiguration(
                            broker: endpoints.frontend,
                            security: keys?.coordinator,
                            jobName: "demo: \(tasks.count) sectors"
                        ),
                        scanners: cliScanners,
                        format: json ? .json : .human,
                        output: Terminal.output(progress: true)
                    )
                    let summary = try await runner.run(
                        tasks,
                        reactor: reactor,
                        logger: logger,
                        interrupts: interruptStream
                    )
                    if interactive && !dashboardNote.isEmpty {
                        try Terminal.write("The dashboard stays up: press Enter to stop.\n")
                        _ = await waitForEnter(interrupted)
                    }
                    return summary
                }
            }
        }
        let result = await running.result
        await serverGroup?.triggerGracefulShutdown()
        _ = try? await server.value
        let summary = try result.get()
        if interrupts.received { throw ExitCode(130) }
        // A task that did not complete, or an output that failed (standard output full).
        if summary.failures > 0 { throw ExitCode(1) }
    }
}

/// Waits for a line on standard input (a terminal); false when Ctrl-C or SIGTERM came first.
func waitForEnter(_ interrupted: @Sendable () -> Bool) async -> Bool {
    var input = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
    while !interrupted() {
        if poll(&input, 1, 0) > 0 {
            _ = readLine()
            return !interrupted()
        }
        try? await Task.sleep(for: .milliseconds(100))
    }
    return false
}

/// "st", "nd", "rd" or "th" for a positive number.
func ordinalSuffix(_ n: Int) -> String {
    if (11...13).contains(n % 100) { return "th" }
    switch n % 10 {
    case 1: return "st"
    case 2: return "nd"
    case 3: return "rd"
    default: return "th"
    }
}

extension Result {
    /// The error, when this is a failure.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
