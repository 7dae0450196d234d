import ArgumentParser
import Foundation
import Logging
import SkyNet
import SkyNetCLI
import ZeroMQ

struct BenchCommand: AsyncParsableCommand, CheckedArguments {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure SkyNet: start a broker and workers, run a workload from one client, stop them.",
        discussion: """
            Workloads:
              throughput  N no-op tasks (default 20000), all submitted up front;
                          timed from the first submit to the last result
              latency     sequential round trips (default 2000): submit one task,
                          wait for its result (--client: how the client waits)
              efficiency  400 tasks of 100 ms on 4 workers × 4 slots: makespan
                          and ideal/makespan
              failures    1000 no-op tasks, every 10th attempt fails; wall time
                          against the same run without failures, with the
                          default retry policy and retried without backoff
              scale       100 workers × 4 slots, 4000 tasks of 100 ms (ideal 1 s)
              memory      1,000,000 tasks queued at a broker with no workers;
                          broker and client RSS
              journal     tasks accepted per second by a broker with and without
                          --journal (no workers), alternated for --rounds rounds
              fairness    a 10-task job submitted by a second coordinator just
                          after a 10,000-task job (2 ms tasks, 1 worker × 4):
                          how long the small job takes, against a single FIFO

            Start-up and a 200-task warm-up are not timed. With --json the last
            line of standard output is one JSON object with wall_s, tasks,
            completed, failed, tasks_per_s, p50_us, p99_us, setup_s and the
            settings used. The broker and workers are separate processes of this
            same binary unless --in-process is given.
            """
    )

    enum Workload: String, ExpressibleByArgument, CaseIterable {
        case throughput, latency, efficiency, failures, scale, memory, journal, fairness, typed
    }

    /// How the latency workload's client waits for each result.
    enum Client: String, ExpressibleByArgument, CaseIterable {
        /// `Coordinator.runChain`: the next task leaves from the last one's result, on the reactor.
        case chain
        /// A loop of `await Coordinator.run(_:)`: the client's task suspends for every result.
        case run
    }

    @Argument(help: "throughput, latency, efficiency, failures, scale, memory, journal or fairness.")
    var workload: Workload

    @Option(help: "Tasks (default: the workload's own).")
    var tasks: Int?

    @Option(help: "Worker processes (default: the workload's own).")
    var workers: Int?

    @Option(help: "Slots per worker.")
    var slots = 4

    @Option(help: "Rounds (journal: each round runs both brokers).")
    var rounds = 3

    @Flag(help: "Run the broker and workers in this process (on their own reactor thread).")
    var inProcess = false

    @Flag(help: "Print the result as one JSON object (the last line of standard output).")
    var json = false

    @Flag(help: "CURVE on: fresh keys for the broker, its workers and the client.")
    var curve = false

    @Flag(
        help: "The broker serves its HTTP endpoint, and a watcher reads /metrics and /api/status every 250 ms."
    )
    var http = false

    /// The run's CURVE keys (with --curve), for every part the workloads start.
    @TaskLocal static var keys: EphemeralKeys?
    /// With --http: the broker serves HTTP and is watched.
    @TaskLocal static var http = false

    @Option(
        help: """
            latency: how the client waits for each result: chain (Coordinator.runChain, the next \
            task leaves as the last result comes in) or run (a loop of await Coordinator.run).
            """
    )
    var client: Client = .chain

    @OptionGroup var polling: ReactorOptions
    @OptionGroup var logging: LoggingOptions

    func check() throws {
        if let tasks = self.tasks {
            guard (1...10_000_000).contains(tasks) else { throw ValidationError("--tasks must be 1 to 10000000") }
        }
        if let workers = self.workers {
            // None would leave the bench's tasks waiting at the broker for good (the memory and
            // journal workloads start none whatever this says).
            guard (1...500).contains(workers) else { throw ValidationError("--workers must be 1 to 500") }
        }
        guard (1...1024).contains(self.slots) else { throw ValidationError("--slots must be 1 to 1024") }
        guard (1...20).contains(self.rounds) else { throw ValidationError("--rounds must be 1 to 20") }
        if self.http && self.inProcess { throw ValidationError("--http needs the broker in its own process") }
        if self.client != .chain && self.workload != .latency {
            throw ValidationError("--client applies to the latency workload only")
        }
        if self.inProcess && [.memory, .journal].contains(self.workload) {
            throw ValidationError("--in-process does not apply to the \(self.workload.rawValue) workload")
        }
    }

    func run() async throws {
        // The broker and workers it starts stop when it is gone, however it ends.
        ParentWatch.tieChildren()
        let keys = self.curve ? try EphemeralKeys.make() : nil
        defer { keys?.remove() }
        try await Self.$keys.withValue(keys) {
            try await Self.$http.withValue(self.http) { try await self.measure() }
        }
    }

    private func measure() async throws {
        let logger = self.logging.logger("skynet.bench", default: .error)
        var report: BenchReport
        switch self.workload {
        case .throughput:
            report = try await self.jobWorkload(
                tasks: self.tasks ?? 20_000,
                workers: self.workers ?? 1,
                work: .zero,
                logger: logger
            )
        case .efficiency:
            report = try await self.jobWorkload(
                tasks: self.tasks ?? 400,
                workers: self.workers ?? 4,
                work: .milliseconds(100),
                logger: logger
            )
        case .scale:
            report = try await self.jobWorkload(
                tasks: self.tasks ?? 4_000,
                workers: self.workers ?? 100,
                work: .milliseconds(100),
                logger: logger
            )
        case .failures:
            report = try await self.failures(logger: logger)
        case .latency:
            report = try await self.latency(logger: logger)
        case .memory:
            report = try await self.memory(logger: logger)
        case .journal:
            report = try await self.journal(logger: logger)
        case .fairness:
            report = try await self.fairness(logger: logger)
        case .typed:
            report = try await self.typed(logger: logger)
        }
        report.settings["curve"] = self.curve
        report.settings["http"] = self.http
        if self.json {
            try Terminal.write(report.json() + "\n")
        } else {
            try Terminal.write(report.human() + "\n")
        }
        if report.failedRun { throw ExitCode(1) }
    }

    // MARK: Workloads
}
