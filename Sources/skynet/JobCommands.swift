import ArgumentParser
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import ZeroMQ

/// A job id on the command line (the UUID `skynet submit --detach` printed).
struct JobArgument: ExpressibleByArgument, Sendable {
    let id: TaskID

    init?(argument: String) {
        guard let id = TaskID(argument), id != .zero else { return nil }
        self.id = id
    }

    static var defaultCompletionKind: CompletionKind { .default }
}

/// `--broker`, `--connect-timeout` (also `--timeout`) and the CURVE flags, for commands that talk to
/// a broker's frontend.
struct BrokerClientOptions: ParsableArguments, CheckedArguments {
    @Option(
        help: ArgumentHelp(
            "The broker's frontend endpoint; for an HA group, every member's, separated by commas.",
            discussion: "Also from SKYNET_BROKER."
        )
    )
    var broker = defaultBroker("tcp://127.0.0.1:5555")

    @Option(
        name: [.customLong("connect-timeout"), .customLong("timeout")],
        help: "Give up when the broker has not answered within this time (a duration: 5s)."
    )
    var connectTimeout = DurationArgument(.seconds(5))

    @OptionGroup var curve: CurveOptions

    func check() throws {
        try checkBrokers(self.broker, flag: "--broker")
    }
}

struct ResultsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "results",
        abstract: "Print a detached job's results, now or later, from a durable broker.",
        discussion: """
            Prints the final result of every task that has one, then a line that says how many are still pending \
            (and which). With --follow it waits for the rest and ends when the job is done. Exits 0 when the job \
            is done and every task completed, 1 otherwise. Finished jobs are kept by the broker for 24 h \
            (--job-retention).
            """
    )

    @Argument(help: "The job id that `skynet submit --detach` printed.")
    var job: JobArgument

    @Flag(help: "Keep printing results as they come until the job is done.")
    var follow = false

    @Flag(help: "Print one JSON object per final result, then {\"job\":{…}}.")
    var json = false

    @OptionGroup var connection: BrokerClientOptions
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = self.logging.logger("skynet.results", default: .warning)
        let (broker, job, follow, json, timeout) = (
            self.connection.broker, self.job.id, self.follow, self.json, self.connection.connectTimeout.duration
        )
        let security = try self.connection.curve.load()
        let (status, commands) = try await withReactor(name: "results") { reactor in
            let client = DetachedJobClient(
                broker: broker,
                reactor: reactor,
                logger: logger,
                connectTimeout: timeout,
                security: security
            )
            try await client.connect()
            var reporter = JobReporter(format: json ? .json : .human, total: 0)
            var last: DetachedJobStatus?
            var commands = false
            do {
                for try await event in await client.results(job: job, follow: follow) {
                    switch event {
                    case .result(let result):
                        // As an attached job prints it: a command's own output (or its --json fields),
                        // other kinds a line.
                        let (stdout, stderr) = reporter.output(result)
                        // A result that cannot be printed stops the listing (the broker keeps it).
                        if !stdout.isEmpty { try Terminal.write(bytes: stdout) }
                        if !stderr.isEmpty { _ = POSIX.writeAll(STDERR_FILENO, stderr) }
                        if result.task.kind == ExecScanner.kind { commands = true }
                    case .status(let status):
                        last = status
                    }
                }
            } catch {
                await client.close()
                throw CLIError("\(error)")
            }
            await client.close()
            return (last, commands)
        }
        guard let status else { throw CLIError("the broker did not say how job \(job) stands") }
        if json {
            try Terminal.write("{\"job\":\(status.json())}\n")
        } else if commands {
            // Standard output carries only the commands' output, as for an attached job.
            Terminal.writeAll(STDERR_FILENO, Self.describe(status) + "\n")
        } else {
            try Terminal.write(Self.describe(status) + "\n")
        }
        if !(status.done && status.completed == status.tasks) { throw ExitCode(1) }
    }

    static func describe(_ status: DetachedJobStatus) -> String {
        var line =
            "Job \(status.job): \(status.tasks) tasks, \(status.completed) completed, \(status.failed) failed, "
            + "\(status.cancelled) cancelled, \(status.pending) pending"
        if status.done { return line + "; done" }
        if status.cancelling { line += " (cancelling)" }
        line += ": " + status.pendingIDs.prefix(10).joined(separator: ", ")
        if status.pending > 10 { line += ", …" }
        return line
    }
}

struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel a detached job: its queued tasks at once, its running ones on their workers.",
        discussion:
            "Tasks that finished keep their results; the others end as cancelled (see `skynet results JOB`)."
    )

    @Argument(help: "The job id that `skynet submit --detach` printed.")
    var job: JobArgument

    @OptionGroup var connection: BrokerClientOptions
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = self.logging.logger("skynet.cancel", default: .warning)
        let (broker, job, timeout) = (self.connection.broker, self.job.id, self.connection.connectTimeout.duration)
        let security = try self.connection.curve.load()
        let status = try await withReactor(name: "cancel") { reactor in
            let client = DetachedJobClient(
                broker: broker,
                reactor: reactor,
                logger: logger,
                connectTimeout: timeout,
                security: security
            )
            try await client.connect()
            do {
                let status = try await client.cancel(job: job)
                await client.close()
                return status
            } catch {
                await client.close()
                throw CLIError("\(error)")
            }
        }
        try Terminal.write(
            "Job \(status.job): cancelling \(status.pending) unfinished task\(status.pending == 1 ? "" : "s"); "
                + "\(status.completed) completed, \(status.failed) failed, \(status.cancelled) cancelled so far\n"
        )
    }
}
