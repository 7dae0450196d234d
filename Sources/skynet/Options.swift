import ArgumentParser
import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import Synchronization
import ZeroMQ

/// A duration on the command line: `250ms`, `1s`, `2m`.
struct DurationArgument: ExpressibleByArgument, Sendable {
    let duration: Duration

    init(_ duration: Duration) { self.duration = duration }

    init?(argument: String) {
        guard let duration = DurationParser.parse(argument) else { return nil }
        self.duration = duration
    }

    var defaultValueDescription: String { DurationParser.format(self.duration) }
}

/// A size on the command line: `1M`, `64K`, `512` (bytes; K and M are 1024 and 1024²).
struct SizeArgument: ExpressibleByArgument, Sendable {
    let bytes: Int

    init(_ bytes: Int) { self.bytes = bytes }

    init?(argument: String) {
        let text = argument.uppercased()
        let (digits, scale): (Substring, Int) =
            switch text.last {
            case "K": (text.dropLast(), 1 << 10)
            case "M": (text.dropLast(), 1 << 20)
            case "G": (text.dropLast(), 1 << 30)
            default: (text[...], 1)
            }
        guard let value = Int(digits), value >= 0, value <= Int.max / scale else { return nil }
        self.bytes = value * scale
    }

    var defaultValueDescription: String {
        self.bytes % (1 << 20) == 0
            ? "\(self.bytes >> 20)M" : self.bytes % 1024 == 0 ? "\(self.bytes >> 10)K" : "\(self.bytes)"
    }
}

/// `--retry local|remote|none`.
enum RetryArgument: String, ExpressibleByArgument, CaseIterable {
    case local, remote, none

    var placement: RetryPolicy.Placement {
        switch self {
        case .local: .local
        case .remote: .remote
        case .none: .none
        }
    }
}

/// `--log-level`.
enum LogLevelArgument: String, ExpressibleByArgument, CaseIterable {
    case trace, debug, info, notice, warning, error, critical

    var level: Logger.Level { Logger.Level(rawValue: self.rawValue) ?? .info }
}

/// `--log-format`.
enum LogFormatArgument: String, ExpressibleByArgument, CaseIterable {
    case text, json
}

struct LoggingOptions: ParsableArguments {
    @Option(help: "Log level (logs go to standard error).")
    var logLevel: LogLevelArgument?

    @Option(help: "Logs as text, or as one JSON object a line (for log collectors).")
    var logFormat: LogFormatArgument = .text

    /// Sets up logging to standard error once, and returns a logger.
    func logger(_ label: String, default level: Logger.Level) -> Logger {
        let chosen = self.logLevel?.level ?? level
        LoggingSetup.bootstrap(level: chosen, json: self.logFormat == .json)
        var logger = Logger(label: label)
        logger.logLevel = chosen
        return logger
    }
}

enum LoggingSetup {
    static func bootstrap(level: Logger.Level, json: Bool = false) {
        LoggingSystem.bootstrap { label in
            if json { return JSONLogHandler(label: label, logLevel: level) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

/// `--log-format json`: one object a line on standard error, with `time`, `level`, `label`,
/// `message`, `source`, and the same metadata fields as the text format (as strings).
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    init(label: String, logLevel: Logger.Level) {
        self.label = label
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = self.metadata.merging(event.metadata ?? [:]) { _, new in new }
        fields["time"] = nil
        var line = "{\"time\":" + JobReporter.quote(Self.timestamp()) + ",\"level\":\"\(event.level)\""
        line += ",\"label\":" + JobReporter.quote(self.label) + ",\"message\":" + JobReporter.quote("\(event.message)")
        line += ",\"source\":" + JobReporter.quote(event.source)
        for (key, value) in fields.sorted(by: { $0.key < $1.key })
        where !["level", "label", "message", "source"].contains(key) {
            line += "," + JobReporter.quote(key) + ":" + JobReporter.quote("\(value)")
        }
        Terminal.writeAll(STDERR_FILENO, line + "}\n")
    }

    /// Now in RFC 3339 with milliseconds, UTC.
    static func timestamp() -> String {
        // From Date, not clock_gettime: a release build resolves `timespec` through CDispatch, which
        // member import visibility then refuses.
        let now = Date().timeIntervalSince1970
        let whole = now.rounded(.down)
        var parts = tm()
        var seconds = time_t(whole)
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
            parts.tm_year + 1900,
            parts.tm_mon + 1,
            parts.tm_mday,
            parts.tm_hour,
            parts.tm_min,
            parts.tm_sec,
            Int32((now - whole) * 1000)
        )
    }
}

/// One-line errors for the user (ArgumentParser prints `Error: <description>` and exits 1).
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func checkEndpoint(_ endpoint: String, binding: Bool, flag: String) throws {
    if let problem = Endpoint.problem(with: endpoint, binding: binding) {
        throw ValidationError("\(flag): \(problem)")
    }
}

/// `--idle-spin`: how long a long-running command's reactor polls before it sleeps under traffic.
struct ReactorOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Under steady traffic, poll up to this long for the next message before sleeping (0: never).",
            discussion:
                "Adaptive: the window grows while messages come within it and falls to zero when the process is idle. It saves the thread wake-ups that dominate a message's cost on virtual machines, for CPU spent polling (yielding to other threads); set 0 where CPU is metered by a quota.",
            valueName: "duration"
        )
    )
    var idleSpin = DurationArgument(IdleSpin.defaultLimit)

    func validate() throws {
        guard self.idleSpin.duration <= .milliseconds(10) else {
            throw ValidationError("--idle-spin must be at most 10ms")
        }
    }

    /// The flag as it is passed on to a child process.
    var arguments: [String] { ["--idle-spin", DurationParser.format(self.idleSpin.duration)] }
}

/// The task kinds the `skynet` command runs: workers scan them, and coordinators re-run them locally.
/// Besides sectors, two no-ops for benchmarks and smoke tests: `noop` echoes its bytes (the raw,
/// wire-level form) and `noop-int` returns its Int (the typed form).
let cliScanners: [any SkyNet.TaskScanner] = [SectorScanner(), RawNoop(), IntNoop()]

/// `noop`: returns its input bytes, at once.
struct RawNoop: TaskScanner {
    static let kind = "noop"
    func scan(_ input: [UInt8]) async throws -> [UInt8] { input }
    func scanImmediately(_ input: [UInt8]) throws -> [UInt8]? { input }
}

/// `noop-int`: returns its input number, at once (through the typed API's coding).
struct IntNoop: TaskScanner {
    static let kind = "noop-int"
    func scan(_ input: Int) async throws -> Int { input }
    func scanImmediately(_ input: Int) throws -> Int? { input }
}

/// Standard output and, on a terminal, a progress line on standard error.
enum Terminal {
    static func write(_ text: String) {
        self.writeAll(STDOUT_FILENO, text)
    }

    /// Writes all of `text` to a file descriptor (no stdio buffers, so lines from any thread stay whole).
    static func writeAll(_ fd: Int32, _ text: String) {
        _ = POSIX.writeAll(fd, Array(text.utf8))
    }

    static var stderrIsTTY: Bool { isatty(STDERR_FILENO) != 0 }

    static func progress(_ line: String?) {
        // Clear the line, then draw the new one without a newline (nil only clears).
        self.writeAll(STDERR_FILENO, "\r\u{1B}[K" + (line ?? ""))
    }

    static func output(progress: Bool) -> JobRunner.Output {
        let progressSink: (@Sendable (String?) -> Void)?
        if progress && Terminal.stderrIsTTY {
            progressSink = { line in Terminal.progress(line) }
        } else {
            progressSink = nil
        }
        return JobRunner.Output(
            write: { text in Terminal.write(text) },
            writeBytes: { bytes in _ = POSIX.writeAll(STDOUT_FILENO, bytes) },
            writeError: { bytes in _ = POSIX.writeAll(STDERR_FILENO, bytes) },
            progress: progressSink
        )
    }
}

/// Ctrl-C and SIGTERM for a command that runs a job: the first one is delivered on ``stream`` (so
/// the job is cancelled and its partial summary printed), a second one quits at once (exit 130).
final class Interrupts {
    /// What the signal handlers share (on a Dispatch queue).
    private final class State: Sendable {
        let continuation: AsyncStream<String>.Continuation
        let count = Mutex(0)
        /// Whether the first signal says "cancelling the job" (the receiver of ``stream`` may say
        /// something else).
        let announce: Bool

        init(_ continuation: AsyncStream<String>.Continuation, announce: Bool) {
            self.continuation = continuation
            self.announce = announce
        }

        func deliver(_ reason: String) {
            let count = self.count.withLock { count in
                count += 1
                return count
            }
            if count > 1 {
                Terminal.writeAll(STDERR_FILENO, "\nQuitting at once.\n")
                exit(130)
            }
            if self.announce {
                let title = reason.prefix(1).uppercased() + reason.dropFirst()
                Terminal.writeAll(STDERR_FILENO, "\n\(title): cancelling the job (again to quit at once)\n")
            }
            self.continuation.yield(reason)
        }
    }

    let stream: AsyncStream<String>
    private let state: State
    /// The signal sources, alive as long as this object.
    private let sources: [any DispatchSourceSignal]

    init(announce: Bool = true) {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        let state = State(continuation, announce: announce)
        var sources: [any DispatchSourceSignal] = []
        for (number, reason) in [(SIGINT, "interrupted"), (SIGTERM, "terminated")] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { state.deliver(reason) }
            source.resume()
            sources.append(source)
        }
        self.stream = stream
        self.state = state
        self.sources = sources
    }

    deinit {
        for source in self.sources { source.cancel() }
    }

    /// Whether a signal arrived.
    var received: Bool { self.state.count.withLock { $0 > 0 } }

    /// ``received``, as a function any task may call.
    var check: @Sendable () -> Bool {
        let state = self.state
        return { state.count.withLock { $0 > 0 } }
    }
}
