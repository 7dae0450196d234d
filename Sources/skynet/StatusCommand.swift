import ArgumentParser
import Logging
import SkyNet
import SkyNetCLI
import ZeroMQ

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a broker's workers, queue depth and counters."
    )

    @Option(help: "The broker's frontend endpoint.")
    var broker = "tcp://127.0.0.1:5555"

    @Option(help: "Give up when the broker has not answered within this time (a duration: 5s).")
    var timeout = DurationArgument(.seconds(5))

    @Flag(help: "Print the snapshot as JSON.")
    var json = false

    @OptionGroup var curve: CurveOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        try checkEndpoint(self.broker, binding: false, flag: "--broker")
    }

    func run() async throws {
        let logger = self.logging.logger("skynet.status", default: .warning)
        let (broker, timeout) = (self.broker, self.timeout.duration)
        let security = try self.curve.load()
        let (status, refusal) = try await withReactor(name: "status") { reactor in
            try await Coordinator.withCoordinator(
                configuration: {
                    var configuration = CoordinatorConfiguration(broker: broker, security: security)
                    configuration.observer = true
                    return configuration
                }(),
                reactor: reactor,
                logger: logger,
                scanners: []
            ) {
                (await $0.brokerStatus(timeout: timeout), await $0.refusal)
            }
        }
        if let refusal { throw CLIError(refusal.message) }
        guard let status else { throw CLIError(CoordinatorError.unreachable(broker, within: timeout).message) }
        if self.json {
            Terminal.write(status.json() + "\n")
            return
        }
        var out =
            "Broker epoch \(status.epoch): \(status.workers.count) workers, \(status.queued) queued, \(status.leased) running, "
        out += "\(status.coordinators) coordinators\n"
        for worker in status.workers {
            out +=
                "  \(worker.name)  \(worker.leased)/\(worker.slots) slots busy  kinds: \(worker.kinds.joined(separator: ","))"
            if let host = worker.figures?.host, !host.isEmpty { out += "  on \(host)" }
            if worker.sharedKey {
                out += "  SHARED KEY \(worker.key ?? "")…: another live worker holds it (a copied secret?)"
            }
            out += worker.draining ? "  (draining)\n" : "\n"
        }
        for (kind, figures) in status.kinds.sorted(by: { $0.key < $1.key }) where figures.queued > 0 {
            out += "  queue \(kind): \(figures.queued) queued, the oldest for "
            out += DurationParser.format(.milliseconds(Int64(figures.oldestQueuedSeconds * 1000))) + "\n"
        }
        for job in status.jobs where job.state == "running" || job.state == "cancelling" {
            let finished = job.completed + job.failed + job.cancelled
            out += "  job \(job.name): \(finished)/\(job.tasks) finished (\(job.failed) failed)"
            out += job.detached ? "  detached \(job.id)\n" : "\n"
        }
        out += "Submitted \(status.submitted), dispatched \(status.dispatched), results \(status.resultsForwarded), "
        out += "requeued \(status.requeued), workers lost \(status.workersLost), stale results \(status.staleResults)\n"
        out +=
            status.curve
            ? "CURVE on: \(status.allowedWorkers) worker and \(status.allowedCoordinators) coordinator keys allowed, \(status.refusedHandshakes) refused\n"
            : "CURVE off (plain text)\n"
        if !status.badInput.isEmpty {
            out +=
                "Bad input dropped: "
                + status.badInput.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                + "\n"
        }
        Terminal.write(out)
    }
}
