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

/// `skynet broker --prefetch`: whether workers of short tasks are lent tasks beyond their slots.
enum PrefetchArgument: String, ExpressibleByArgument, CaseIterable {
    case auto, off
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

/// `--idle-spin`: how long a long-running command's reactor polls before it sleeps under traffic.
struct ReactorOptions: ParsableArguments, CheckedArguments {
    @Option(
        help: ArgumentHelp(
            "Under steady traffic, poll up to this long for the next message before sleeping (0: never).",
            discussion:
                "Adaptive: the window grows while messages come within it and falls to zero when the process is idle. It saves the thread wake-ups that dominate a message's cost on virtual machines, for CPU spent polling (yielding to other threads); set 0 where CPU is metered by a quota.",
            valueName: "duration"
        )
    )
    var idleSpin = DurationArgument(IdleSpin.defaultLimit)

    func check() throws {
        guard self.idleSpin.duration <= .milliseconds(10) else {
            throw ValidationError("--idle-spin must be at most 10ms")
        }
    }

    /// The flag as it is passed on to a child process.
    var arguments: [String] { ["--idle-spin", DurationParser.format(self.idleSpin.duration)] }
}

/// A command or option group whose flags are checked together after parsing (`check()`, in place
/// of ArgumentParser's `validate()`, which this provides).
///
/// ArgumentParser runs `validate()` before it reports a flag it does not know, so a typo hides
/// behind the error its absence causes: `skynet submit --brokr …` would say "give --sectors N"
/// rather than "Unknown option '--brokr'". `SkyNetCommand.main` parses once more with the checks
/// deferred when one fails, and reports the parse error it finds then, if any.
protocol CheckedArguments: ParsableArguments {
    func check() throws
}

/// Whether `CheckedArguments.validate()` runs the checks (not while `SkyNetCommand.main` looks for
/// a parse error hidden behind a failed check).
enum ArgumentChecks {
    @TaskLocal static var deferred = false
}

extension CheckedArguments {
    func validate() throws {
        guard !ArgumentChecks.deferred else { return }
        try self.check()
    }
}
