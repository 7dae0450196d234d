import ArgumentParser
import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import ZeroMQ

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a broker's workers, queue depth and counters."
    )

    @OptionGroup var connection: BrokerClientOptions

    @Flag(help: "Print the snapshot as JSON.")
    var json = false

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = self.logging.logger("skynet.status", default: .warning)
        let members = BrokerList(self.connection.broker).endpoints
        guard members.count > 1 else {
            let status = try await self.connection.fetch(logger: logger)
            try Terminal.write(self.json ? status.json() + "\n" : Self.describe(status))
            return
        }
        // An HA group: each member's role, then the leader's status.
        var leader: BrokerStatus?
        var lines = ""
        for member in members {
            var options = self.connection
            options.broker = member
            do {
                let status = try await options.fetch(logger: logger)
                if self.json { try Terminal.write(status.json() + "\n") }
                let role = status.role ?? "not in a group"
                lines += "  \(member)  \(role)"
                if status.role == "standby" {
                    lines += status.leader.map { " (leader: \($0))" } ?? " (no leader known)"
                }
                lines += "\n"
                if status.role == "leader" || status.role == nil { leader = leader ?? status }
            } catch {
                if self.json { try Terminal.write("{\"broker\":\"\(member)\",\"error\":\"unreachable\"}\n") }
                lines += "  \(member)  unreachable: \(error)\n"
            }
        }
        guard !self.json else { return }
        try Terminal.write("Members:\n" + lines)
        guard let leader else { throw CLIError("no member of \(members.joined(separator: ",")) leads now") }
        try Terminal.write(Self.describe(leader))
    }

    static func describe(_ status: BrokerStatus) -> String {
        // Lent tasks (``BrokerStatus/Worker/lent``) are leased but wait at their worker for a slot.
        let running = min(status.leased, status.workers.reduce(0) { $0 + min($1.leased, $1.slots) })
        let waiting = status.leased - running
        var out =
            "Broker epoch \(status.epoch): \(plural(status.workers.count, "worker")), \(status.queued) queued, \(running) running, "
        if waiting > 0 { out += "\(waiting) waiting at workers, " }
        out += "\(plural(status.coordinators, "coordinator"))\n"
        for worker in status.workers {
            out +=
                "  \(worker.name)  \(min(worker.leased, worker.slots))/\(worker.slots) slots busy"
                + (worker.leased > worker.slots
                    ? ", \(worker.leased - worker.slots) waiting there (lent: its tasks are short)" : "")
                + "  kinds: \(worker.kinds.joined(separator: ","))"
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
        return out
    }

}

/// `1 worker`, `2 workers`.
func plural(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }

struct JobsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jobs",
        abstract: "List a broker's detached jobs: running ones and those it keeps (--job-retention).",
        discussion: """
            One line a job: its id, state, progress and name, most recently active first (the broker \
            lists its 100 most recent). `skynet results JOB` prints one's results, `skynet cancel JOB` \
            cancels it. With --all, also the jobs of connected coordinators and those that ended lately.
            """
    )

    @OptionGroup var connection: BrokerClientOptions

    @Flag(help: "Also list attached jobs (connected coordinators', and those that ended lately).")
    var all = false

    @Flag(help: "Print the jobs as one JSON array.")
    var json = false

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let status = try await self.connection.fetch(logger: self.logging.logger("skynet.jobs", default: .warning))
        let jobs = status.jobs.filter { self.all || $0.detached }
        if self.json {
            try Terminal.write(String(decoding: try JSONStyle.encoder.encode(jobs), as: UTF8.self) + "\n")
            return
        }
        guard !jobs.isEmpty else {
            Terminal.writeAll(
                STDERR_FILENO,
                self.all
                    ? "No jobs.\n"
                    : "No detached jobs (`skynet submit --detach` makes one; --all lists attached jobs too).\n"
            )
            return
        }
        for job in jobs {
            let finished = job.completed + job.failed + job.cancelled
            var line = "\(job.id)  \(job.state)  \(finished)/\(job.tasks) finished"
            line += " (\(job.completed) completed, \(job.failed) failed, \(job.cancelled) cancelled)"
            if let ago = job.endedSecondsAgo {
                line += ", ended \(DurationParser.format(.milliseconds(Int64(ago * 1000)))) ago"
            }
            line += "  \(job.name)\(job.detached ? "" : " (attached)")"
            try Terminal.write(line + "\n")
        }
    }
}

extension BrokerClientOptions {
    /// The broker's STATUS, asked as an observer (not counted as a coordinator, answered at any
    /// limit).
    func fetch(logger: Logger) async throws -> BrokerStatus {
        let (broker, timeout) = (self.broker, self.connectTimeout.duration)
        let security = try self.curve.load()
        let (status, refusal) = try await withReactor(name: "status") { reactor in
            var configuration = CoordinatorConfiguration(broker: broker, security: security)
            configuration.observer = true
            return try await Coordinator.withCoordinator(
                configuration: configuration,
                reactor: reactor,
                logger: logger,
                scanners: []
            ) {
                (await $0.brokerStatus(timeout: timeout), await $0.refusal)
            }
        }
        if let refusal { throw CLIError(refusal.message) }
        guard let status else { throw CLIError(CoordinatorError.unreachable(broker, within: timeout).message) }
        return status
    }
}
