import ArgumentParser
import SkyNet
import SkyNetCLI

@main
struct SkyNetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skynet",
        abstract:
            "A distributed worker pool for Swift on ZeroMQ: a broker, workers, and coordinators that submit ScanTasks.",
        discussion: """
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
}
