import ArgumentParser
import Logging
import Foundation
import SkyNet
import SkyNetCLI
import Synchronization
import ZeroMQ

struct SubmitCommand: AsyncParsableCommand, CheckedArguments {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Submit tasks to a broker and stream their results.",
        discussion: """
            Failed attempts are re-run by the retry policy: on this process's own ScanSystem (local, the default), \
            at the broker (remote), or not at all (none). Exits 0 only when every task completed.

            A --tasks file has one JSON object per line, e.g. {"sector": 9} or {"sector": 9, "work": "250ms", \
            "fail_every": 0, "priority": 1, "id": "<uuid>"}, or a command: {"exec": ["gzip", "-9", "-k", "a.log"], \
            "timeout": "10s", "env": {"K": "V"}}.

            --exec 'gzip -9 -k {}' --inputs FILE runs a command for each line of FILE (- for standard input) on \
            workers started with --allow-command: {} is the line, {#} its number, {.} {/} {//} {/.} as in GNU \
            parallel. The template is split into arguments as a shell splits words (quotes respected); no shell \
            runs. Each command's standard output is printed as it completes (-k: in input order); everything else \
            goes to standard error. Failed commands are retried on workers (--retry remote is the default for \
            commands).

            --cache DIR stores every completed result under a hash of its kind and input, and a later run with the \
            same DIR submits only the tasks with no stored result. Identical tasks in one job run once.

            The exit status is the number of tasks that did not complete (101 for more than 100), 0 when all did.

            Ctrl-C (or SIGTERM) cancels the job: its queued tasks at the broker and its running ones on workers \
            (a running command's whole process group is ended); tasks not completed by then are reported as \
            cancelled, then the partial summary is printed and the exit status is 130. A second Ctrl-C quits at once. Tasks that failed every attempt are listed at \
            the end (the dead-letter report; "dead_letter" in the --json summary).
            """
    )

    @Option(
        help: ArgumentHelp(
            "The broker's frontend endpoint; for an HA group, every member's, separated by commas.",
            discussion: "Also from SKYNET_BROKER."
        )
    )
    var broker = defaultBroker("tcp://127.0.0.1:5555")

    @Option(help: "Scan sectors 1...N.")
    var sectors: Int?

    @Option(help: "What the job is called on the broker's dashboard (default: what it submits).")
    var name: String?

    @Option(help: "A JSON Lines file of tasks.")
    var tasks: String?

    @Option(
        help: ArgumentHelp("A command to run for each line of --inputs, e.g. 'gzip -9 -k {}'.", valueName: "template")
    )
    var exec: String?

    @Option(help: ArgumentHelp("The lines for --exec: a file, or - for standard input.", valueName: "file"))
    var inputs: String?

    @Option(
        name: .customLong("env"),
        help: ArgumentHelp("Pass this variable's value here to every command (repeatable).", valueName: "name")
    )
    var environment: [String] = []

    @Option(
        help: ArgumentHelp(
            "Run commands in this directory on the workers (default: a fresh one each, removed afterwards).",
            valueName: "dir"
        )
    )
    var workdir: String?

    @Option(help: "Keep at most this much of each command's stdout and of its stderr (head and tail beyond it).")
    var maxOutput = SizeArgument(ExecRequest.defaultMaxOutput)

    @Flag(name: [.customShort("k"), .long], help: "Print results in input order, not as they complete.")
    var keepOrder = false

    @Option(help: ArgumentHelp("Write each task's stdout, stderr and exit status to DIR/<seq>/.", valueName: "dir"))
    var results: String?

    @Option(help: ArgumentHelp("Write GNU parallel's job log (tab-separated, one row per task).", valueName: "file"))
    var joblog: String?

    @Option(
        help: ArgumentHelp(
            "Keep completed results in DIR; a later run with the same DIR skips the tasks it holds.",
            valueName: "dir"
        )
    )
    var cache: String?

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

    @Option(help: "Where failed attempts re-run: local, remote or none (default: local; remote for commands).")
    var retry: RetryArgument?

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

    @Option(
        help: ArgumentHelp(
            "Write a JSON line for each task's SUBMIT, ACCEPTED and RESULT, with the broker then in use (for fault tests).",
            valueName: "file"
        )
    )
    var trace: String?

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

    @Flag(help: "With --discover, follow a broker off this host without CURVE.")
    var insecure = false

    @OptionGroup var discovery: DiscoveryOptions
    @OptionGroup var polling: ReactorOptions
    @OptionGroup var curve: CurveOptions
    @OptionGroup var logging: LoggingOptions

    /// What the dashboard calls the job when no --name is given: what it submits.
    var defaultJobName: String {
        if let exec { return "exec \(exec)" }
        if let tasks { return "tasks \(tasks.split(separator: "/").last.map(String.init) ?? tasks)" }
        if let sectors { return "\(sectors) sectors" }
        return "skynet submit"
    }

    func check() throws {
        try checkBrokers(self.broker, flag: "--broker")
        let sources = [self.sectors != nil, self.tasks != nil, self.exec != nil].filter { $0 }.count
        guard sources == 1 else {
            throw ValidationError(
                sources == 0
                    ? "give --sectors N, --tasks FILE.jsonl, or --exec 'COMMAND {}' --inputs FILE"
                    : "give one of --sectors, --tasks and --exec"
            )
        }
        if let n = self.sectors, !(1...10_000_000).contains(n) {
            throw ValidationError("--sectors must be 1 to 10000000")
        }
        if self.exec != nil && self.inputs == nil {
            throw ValidationError("--exec needs --inputs FILE (one task per line; - for standard input)")
        }
        if self.inputs != nil && self.exec == nil { throw ValidationError("--inputs goes with --exec") }
        if let exec = self.exec {
            do {
                _ = try CommandTemplate(exec)
            } catch {
                throw ValidationError(error.description)
            }
        }
        for name in self.environment where ProcessInfo.processInfo.environment[name] == nil {
            throw ValidationError("--env \(name): no such variable is set here")
        }
        guard (1...ExecRequest.maxOutputLimit).contains(self.maxOutput.bytes) else {
            throw ValidationError("--max-output must be 1 byte to 4M")
        }
        let paths = [
            ("--results", self.results, "directory"), ("--joblog", self.joblog, "file"),
            ("--cache", self.cache, "directory"),
        ]
        for (flag, path, kind) in paths where path == "" { throw ValidationError("\(flag) needs a \(kind) path") }
        if self.detach && (self.cache != nil || self.keepOrder || self.results != nil || self.joblog != nil) {
            throw ValidationError("--cache, --keep-order, --results and --joblog need a job that is not --detach")
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
        // A pipe, a FIFO or a terminal is read as it comes, and its lines run as they arrive.
        let streamed = try self.streamedInputs()
        let tasks = streamed == nil ? try self.loadTasks() : []
        KeptUntilExit.keep(tasks)
        if self.detach { return try await self.runDetached(tasks, logger: logger) }
        let hasCommands = streamed != nil || tasks.hasCommands
        let retry = self.retry ?? (hasCommands ? .remote : .local)
        var scanners = cliScanners
        if hasCommands && retry == .local {
            // Asked for: failed commands re-run here, limited to the programs this job names.
            scanners.append(
                try ExecScanner(allowing: Self.localPrograms(tasks), guardCommand: ExecGuardCommand.command)
            )
        }
        let cache: ResultCache?
        do {
            cache = try self.cache.map { try ResultCache(directory: $0) }
        } catch {
            throw CLIError("\(error)")
        }
        let (broker, security) = try await self.discovery.connection(self.broker, self.curve, self.insecure, logger)
        var configuration = CoordinatorConfiguration(
            broker: broker,
            retry: RetryPolicy(
                placement: retry.placement,
                maxAttempts: self.maxAttempts,
                backoff: Backoff(initial: self.backoff.duration, maximum: self.backoffMax.duration)
            ),
            connectTimeout: self.connectTimeout.duration,
            security: security,
            jobName: self.name.flatMap { $0.isEmpty ? nil : $0 } ?? self.defaultJobName
        )
        configuration.tracePath = self.trace
        let runner = JobRunner(
            configuration: configuration,
            scanners: scanners,
            format: self.json ? .json : .human,
            output: Terminal.output(progress: self.progress),
            cache: cache,
            options: JobOutputOptions(keepOrder: self.keepOrder, joblog: self.joblog, resultsDirectory: self.results)
        )
        let interrupts = Interrupts()
        let summary: JobSummary
        do {
            summary = try await withReactor(name: "coordinator", idleSpin: self.polling.idleSpin.duration) { reactor in
                if let streamed {
                    return try await runner.run(
                        streaming: streamed,
                        reactor: reactor,
                        logger: logger,
                        interrupts: interrupts.stream
                    )
                }
                return try await runner.run(tasks, reactor: reactor, logger: logger, interrupts: interrupts.stream)
            }
        } catch let error as JobOutputError {
            throw CLIError(error.description)
        } catch let error as LineReader.BadLine {
            throw CLIError("--inputs \(self.inputsName): \(error)")
        } catch let error as TaskFile.ParseError {
            throw CLIError("--inputs \(self.inputsName): \(error)")
        }
        if streamed != nil, summary.tasks == 0, !interrupts.received {
            throw CLIError("--inputs \(self.inputsName) holds no lines")
        }
        var cacheFailed = false
        do {
            try await cache?.close()
        } catch {
            Terminal.writeAll(STDERR_FILENO, "skynet: --cache: \(error)\n")
            cacheFailed = true
        }
        if interrupts.received { throw ExitCode(130) }
        // GNU parallel's convention: the number of tasks that did not complete, 101 for more than 100;
        // here with the completed ones an output (--joblog, --results, --cache) lost, and at least 1
        // when an output failed at all.
        let notDelivered = max(summary.failures, cacheFailed ? 1 : 0)
        if notDelivered > 0 { throw ExitCode(Int32(min(notDelivered, 101))) }
    }

    /// The programs `tasks` name, found on this host's PATH (for local retries of commands).
    static func localPrograms(_ tasks: [ScanTask]) -> [String] {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        var programs: Set<String> = []
        for task in tasks where task.kind == ExecScanner.kind {
            guard let program = (try? ExecRequest(scanBytes: task.input))?.arguments.first else { continue }
            if program.hasPrefix("/") {
                programs.insert(program)
            } else if let found = path.split(separator: ":").map({ "\($0)/\(program)" }).first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            }) {
                programs.insert(found)
            }
        }
        return programs.sorted().filter { FileManager.default.isExecutableFile(atPath: $0) }
    }

    private func runDetached(_ tasks: [ScanTask], logger: Logger) async throws {
        let attempts = self.retry == RetryArgument.none ? 1 : self.maxAttempts
        let prepared = tasks.map { task in
            var task = task
            task.maxAttempts = attempts
            return task
        }
        let job = TaskID.random()
        let name = self.name.flatMap { $0.isEmpty ? nil : $0 } ?? self.defaultJobName
        let timeout = self.connectTimeout.duration
        let (broker, security) = try await self.discovery.connection(self.broker, self.curve, self.insecure, logger)
        try await withReactor(name: "submit", idleSpin: self.polling.idleSpin.duration) { reactor in
            let client = DetachedJobClient(
                broker: broker,
                reactor: reactor,
                logger: logger,
                connectTimeout: timeout,
                security: security
            )
            try await client.connect()
            // Ctrl-C or SIGTERM mid-submission: what the broker accepted is journaled and runs, so
            // say which job it is and how much of it there is, then stop (130).
            let interrupts = Interrupts(announce: false)
            let interrupted = Task {
                for await reason in interrupts.stream {
                    let accepted = await client.acceptedSoFar
                    // Said on standard error too, so a failed write here loses nothing.
                    try? Terminal.write("\(job)\n")
                    Terminal.writeAll(
                        STDERR_FILENO,
                        "\n\(reason.prefix(1).uppercased() + reason.dropFirst()): job \(job) partly submitted: \(accepted) of \(prepared.count) tasks accepted, and they run; `skynet cancel \(job)` drops them, `skynet results \(job)` shows them\n"
                    )
                    Glibc.exit(130)
                }
            }
            defer { interrupted.cancel() }
            do {
                try await client.submit(prepared, job: job, name: name)
                await client.close()
            } catch {
                let accepted = await client.acceptedSoFar
                await client.close()
                throw CLIError(
                    "job \(job) not fully submitted (\(accepted) of \(prepared.count) tasks accepted\(accepted > 0 ? ", and they run: `skynet cancel \(job)` drops them" : "")): \(error)"
                )
            }
        }
        do {
            try Terminal.write(self.json ? "{\"job\":\"\(job)\",\"tasks\":\(prepared.count)}\n" : "\(job)\n")
        } catch {
            throw CLIError("job \(job) submitted (\(prepared.count) tasks, and they run), but \(error)")
        }
        if !self.json {
            Terminal.writeAll(
                STDERR_FILENO,
                "Job \(job): \(prepared.count) tasks accepted. Results: skynet results \(job) --follow\n"
            )
        }
    }

    /// `--inputs` as the user named it.
    var inputsName: String { self.inputs.map { $0 == "-" ? "(standard input)" : $0 } ?? "" }
}

/// A job's tasks, kept until the process exits and reclaimed with it: freed one by one at the end
/// of `run`, after the summary was printed, 200,000 tasks cost ~320 instructions each (their inputs'
/// arrays released and freed, a deep-credit job's `skynet submit`), time the user waited for the
/// prompt for nothing. One `skynet submit` runs one job and exits.
enum KeptUntilExit {
    private static let tasks = Mutex<[[ScanTask]]>([])

    static func keep(_ tasks: [ScanTask]) {
        guard !tasks.isEmpty else { return }
        Self.tasks.withLock { $0.append(tasks) }
    }
}
