import ArgumentParser
import Glibc
import SkyNet
import SkyNetCLI

@main
struct SkyNetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skynet",
        abstract:
            "A distributed worker pool for Swift on ZeroMQ: a broker, workers, and coordinators that submit ScanTasks.",
        discussion: """
            Exit status: 0 when every task completed; otherwise the number of tasks that did not \
            complete (101 for more than 100; as GNU parallel), 130 after Ctrl-C, 74 when a broker's \
            journal fails, and 255 when the command could not run at all (bad flags or files, a broker \
            unreachable, a key refused).

            Quick start, all in one process:   skynet demo
            Or one process each:               skynet broker
                                               skynet worker --name worker-a
                                               skynet submit --sectors 20 --work 1s
            Detached jobs (a broker with --journal): skynet submit --sectors 20 --detach
                                               skynet results JOB --follow
            With CURVE (any non-loopback address): skynet keygen broker --dir keys, then
                                               skynet broker --curve-secret keys/broker.key_secret \\
                                                 --allow-workers allow/workers --allow-coordinators allow/coordinators
            """,
        version: SkyNetVersion.current,
        subcommands: [
            BrokerCommand.self, WorkerCommand.self, SubmitCommand.self, ResultsCommand.self, CancelCommand.self,
            JobsCommand.self, DemoCommand.self, StatusCommand.self, KeygenCommand.self, BenchCommand.self,
            ExecGuardCommand.self,
        ]
    )

    /// Runs the command. Exit statuses a script can rely on: what a command throws as `ExitCode`
    /// (the tasks that did not complete, 130, 74) stays as it is, help is 0, and every error that
    /// kept the command from running at all (bad flags, a file it cannot read, a broker it cannot
    /// reach, a key it refuses) is 255, outside GNU parallel's range for tasks (ArgumentParser would
    /// give 1 or 64, which read as one or sixty-four tasks that did not complete).
    /// Standard input, output or error closed when started (`skynet submit >&-`): the number is held
    /// by `/dev/null` opened read-only. Otherwise the first descriptor the process opens (a libzmq
    /// socket or eventfd) would take it, and lines meant for the terminal would be written into it;
    /// read-only, a write fails with `EBADF` and is reported like any output that cannot be written.
    static func holdClosedStandardDescriptors() {
        for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 {
            let held = open("/dev/null", O_RDONLY)
            // `open` takes the lowest free number: this one, as the lower ones are open by now.
            if held >= 0 && held != fd { close(held) }
        }
    }

    static func main() async {
        self.holdClosedStandardDescriptors()
        do {
            var command = try parseCommand()
            if var asynchronous = command as? any AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
        } catch {
            if error is ExitCode || exitCode(for: error) == .success { exit(withError: error) }
            let message = fullMessage(for: error)
            if !message.isEmpty { Terminal.writeAll(STDERR_FILENO, message + "\n") }
            Glibc.exit(255)
        }
    }

    /// `parseAsRoot()`, except that a flag ArgumentParser does not know is reported ahead of a failed
    /// check of the flags it does (see `CheckedArguments`): the arguments are parsed once more with
    /// the checks deferred, and a parse error found then is the one the user needs first.
    static func parseCommand() throws -> any ParsableCommand {
        do {
            return try parseAsRoot()
        } catch {
            if exitCode(for: error) == .success { throw error }  // --help, --version
            _ = try ArgumentChecks.$deferred.withValue(true) { try parseAsRoot() }
            throw error
        }
    }
}
