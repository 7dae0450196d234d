import ArgumentParser
import Logging
import Foundation
import SkyNet
import SkyNetCLI
import ZeroMQ

struct SubmitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Submit tasks to a broker and stream their results.",
        discussion: """
            Failed attempts are re-run by the retry policy: on this process's own ScanSystem (local, the default), \
            at the broker (remote), or not at all (none). Exits 0 only when every task completed.

            A --tasks file has one JSON object per line, e.g. {"sector": 9} or {"sector": 9, "work": "250ms", \
            "fail_every": 0, "priority": 1, "id": "<uuid>"}.

            Ctrl-C (or SIGTERM) cancels the job: its queued tasks at the broker and its running ones on workers; \
            tasks not completed by then are reported as cancelled, then the partial summary is printed and the \
            exit status is 130. A second Ctrl-C quits at once. Tasks that failed every attempt are listed at \
            the end (the dead-letter report; "dead_letter" in the --json summary).
            """
    )

    @Option(help: "The broker's frontend endpoint.")
    var broker = "tcp://127.0.0.1:5555"

    @Option(help: "Scan sectors 1...N.")
    var sectors: Int?

    @Option(help: "A JSON Lines file of tasks.")
    var tasks: String?

    @Option(help: "How long each sector scan takes (250ms, 1s, 2m…).")
    var work = DurationArgument(.seconds(1))

    @Option(help: "Every Nth scan attempt in a process fails (0: never).")
    var failEvery = 0

    @Flag(help: "Sector scans spin the CPU for --work instead of sleeping.")
    var cpuBound = false

    @Option(
        help: ArgumentHelp(
            "A deadline for each attempt (a duration: 30s); a scan still running then is cancelled and reported as timed out.",
            discussion: "The retry policy treats a timeout like a failure. For --tasks, a task's own \"timeout\" wins.",
            valueName: "duration"
        )
    )
    var timeout: DurationArgument?

    @Option(help: "Where failed attempts re-run: local, remote or none.")
    var retry = RetryArgument.local

    @Option(help: "Attempts per task in all, the first included.")
    var maxAttempts = 3

    @Option(
        help: ArgumentHelp(
            "The longest wait before the 2nd attempt (0ms: retry at once); it doubles for each later attempt.",
            discussion: "Each wait is drawn at random between zero and its bound (jitter), so 10ms means 0–10 ms.",
            valueName: "duration"
        )
    )
    var backoff = DurationArgument(.milliseconds(10))

    @Option(help: ArgumentHelp("The longest wait between attempts.", valueName: "duration"))
    var backoffMax = DurationArgument(.seconds(5))

    @Option(help: "Give up when the broker has not answered within this time (a duration: 5s).")
    var connectTimeout = DurationArgument(.seconds(5))

    @Flag(help: "Print one JSON object per final result, then a summary object.")
    var json = false

    @Flag(
        help: ArgumentHelp(
            "Submit as a detached job: print its id and exit once every task is accepted (a durable broker only).",
            discussion:
                "Read the results with `skynet results JOB [--follow]`, cancel with `skynet cancel JOB`. The broker retries failed attempts of a detached job itself (at once, up to --max-attempts; --retry none: 1 attempt)."
        )
    )
    var detach = false

    @Flag(inversion: .prefixedNo, help: "Show live progress on a terminal.")
    var progress = true

    @OptionGroup var polling: ReactorOptions
    @OptionGroup var curve: CurveOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        try checkEndpoint(self.broker, binding: false, flag: "--broker")
        switch (self.sectors, self.tasks) {
        case (nil, nil): throw ValidationError("give --sectors N or --tasks FILE.jsonl")
        case (.some, .some): throw ValidationError("give either --sectors or --tasks, not both")
        case (.some(let n), nil):
            guard (1...10_000_000).contains(n) else { throw ValidationError("--sectors must be 1 to 10000000") }
        case (nil, .some): break
        }
        guard self.failEvery >= 0 else { throw ValidationError("--fail-every must be 0 or more") }
        guard (1...100).contains(self.maxAttempts) else { throw ValidationError("--max-attempts must be 1 to 100") }
        guard self.backoff.duration <= .seconds(3600), self.backoffMax.duration <= .seconds(3600) else {
            throw ValidationError("--backoff and --backoff-max must be at most 1h")
        }
        if let timeout = self.timeout?.duration {
            guard timeout >= .milliseconds(1), timeout <= .seconds(86_400 * 24) else {
                throw ValidationError("--timeout must be between 1ms and 24 days")
            }
        }
    }

    func run() async throws {
        let logger = self.logging.logger("skynet.submit", default: .warning)
        let tasks = try self.loadTasks()
        if self.detach { return try await self.runDetached(tasks, logger: logger) }
        let runner = JobRunner(
            configuration: CoordinatorConfiguration(
                broker: self.broker,
                retry: RetryPolicy(
                    placement: self.retry.placement,
                    maxAttempts: self.maxAttempts,
                    backoff: Backoff(initial: self.backoff.duration, maximum: self.backoffMax.duration)
                ),
                connectTimeout: self.connectTimeout.duration,
                security: try self.curve.load()
            ),
            scanners: cliScanners,
            format: self.json ? .json : .human,
            output: Terminal.output(progress: self.progress)
        )
        let interrupts = Interrupts()
        let summary = try await withReactor(name: "coordinator", idleSpin: self.polling.idleSpin.duration) { reactor in
            try await runner.run(tasks, reactor: reactor, logger: logger, interrupts: interrupts.stream)
        }
        if interrupts.received { throw ExitCode(130) }
        if !summary.succeeded { throw ExitCode(1) }
    }

    private func runDetached(_ tasks: [ScanTask], logger: Logger) async throws {
        let attempts = self.retry == .none ? 1 : self.maxAttempts
        let prepared = tasks.map { task in
            var task = task
            task.maxAttempts = attempts
            return task
        }
        let job = TaskID.random()
        let (broker, timeout) = (self.broker, self.connectTimeout.duration)
        let security = try self.curve.load()
        try await withReactor(name: "submit", idleSpin: self.polling.idleSpin.duration) { reactor in
            let client = DetachedJobClient(
                broker: broker,
                reactor: reactor,
                logger: logger,
                connectTimeout: timeout,
                security: security
            )
            try await client.connect()
            do {
                try await client.submit(prepared, job: job)
                await client.close()
            } catch {
                await client.close()
                throw CLIError("job \(job) not fully submitted: \(error)")
            }
        }
        if self.json {
            Terminal.write("{\"job\":\"\(job)\",\"tasks\":\(prepared.count)}\n")
        } else {
            Terminal.write("\(job)\n")
            Terminal.writeAll(
                STDERR_FILENO,
                "Job \(job): \(prepared.count) tasks accepted. Results: skynet results \(job) --follow\n"
            )
        }
    }

    func loadTasks() throws -> [ScanTask] {
        var tasks = try self.readTasks()
        if let timeout = self.timeout?.duration {
            for index in tasks.indices where tasks[index].timeout == nil { tasks[index].timeout = timeout }
        }
        return tasks
    }

    private func readTasks() throws -> [ScanTask] {
        if let sectors = self.sectors {
            return (1...sectors).map {
                ScanTask.sector($0, work: self.work.duration, failEvery: self.failEvery, cpuBound: self.cpuBound)
            }
        }
        let path = self.tasks!
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CLIError("cannot read task file \(path)")
        }
        guard let text = String(data: data, encoding: .utf8) else { throw CLIError("\(path) is not UTF-8 text") }
        do {
            let tasks = try TaskFile.parse(text, defaultWork: self.work.duration, defaultFailEvery: self.failEvery)
            guard !tasks.isEmpty else { throw CLIError("\(path) holds no tasks") }
            return tasks
        } catch let error as TaskFile.ParseError {
            throw CLIError("\(path): \(error)")
        }
    }
}
