import ArgumentParser
import Foundation
import SkyNet

/// `skynet exec-guard …` (hidden): the ``ExecGuard`` a worker starts around each command.
struct ExecGuardCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: ExecGuard.subcommand,
        abstract: "Run one command for a worker (started by the worker itself).",
        shouldDisplay: false
    )

    @Argument(parsing: .captureForPassthrough)
    var arguments: [String] = []

    func run() throws { ExecGuard.main(self.arguments) }

    /// How this program starts a guard: itself (its real path) and this subcommand.
    static var command: [String] {
        [URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path, ExecGuard.subcommand]
    }
}
