import ArgumentParser
import Foundation
import Logging
import SkyNet
import ZeroMQ

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure SkyNet: start a broker and workers, run a workload from one client, stop them.",
        discussion: """
            Workloads:
              throughput  N no-op tasks (default 20000), all submitted up front;
                          timed from the first submit to the last result
              latency     sequential round trips (default 2000): submit one task,
                          wait for its result
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

            Start-up and a 200-task warm-up are not timed. With --json the last
            line of standard output is one JSON object with wall_s, tasks,
            completed, failed, tasks_per_s, p50_us, p99_us, setup_s and the
            settings used. The broker and workers are separate processes of this
            same binary unless --in-process is given.
            """
    )

    enum Workload: String, ExpressibleByArgument, CaseIterable {
        case throughput, latency, efficiency, failures, scale, memory, journal
    }

    @Argument(help: "throughput, latency, efficiency, failures, scale, memory or journal.")
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

    @OptionGroup var polling: ReactorOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        if let tasks = self.tasks {
            guard (1...10_000_000).contains(tasks) else { throw ValidationError("--tasks must be 1 to 10000000") }
        }
        if let workers = self.workers {
            guard (0...500).contains(workers) else { throw ValidationError("--workers must be 0 to 500") }
        }
        guard (1...1024).contains(self.slots) else { throw ValidationError("--slots must be 1 to 1024") }
        guard (1...20).contains(self.rounds) else { throw ValidationError("--rounds must be 1 to 20") }
        if self.inProcess && [.memory, .journal].contains(self.workload) {
            throw ValidationError("--in-process does not apply to the \(self.workload.rawValue) workload")
        }
    }

    func run() async throws {
        let logger = self.logging.logger("skynet.bench", default: .error)
        let report: BenchReport
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
        }
        if self.json {
            Terminal.write(report.json() + "\n")
        } else {
            Terminal.write(report.human() + "\n")
        }
        if report.failedRun { throw ExitCode(1) }
    }

    // MARK: Workloads

    /// Starts the broker and `workers` workers, waits until they are registered, warms up with 200
    /// untimed tasks, runs `body` with the coordinator and the setup time, and stops everything.
    private func withWarmCluster(
        workers: Int,
        logger: Logger,
        _ body: @escaping @Sendable (Coordinator, Duration) async throws -> BenchReport
    ) async throws -> BenchReport {
        let (slots, inProcess, polling) = (self.slots, self.inProcess, self.polling)
        var report = try await withBenchCluster(
            workers: workers,
            slots: slots,
            inProcess: inProcess,
            polling: polling,
            logger: logger
        ) { endpoint, started in
            try await withBenchCoordinator(
                endpoint: endpoint,
                workers: workers,
                started: started,
                polling: polling,
                logger: logger
            ) {
                coordinator,
                setup in
                _ = try await measureJob(coordinator, (1...200).map { ScanTask.sector($0) })
                return try await body(coordinator, setup)
            }
        }
        report.settings["workers"] = workers
        report.settings["slots"] = slots
        report.settings["in_process"] = inProcess
        return report
    }

    /// N tasks of `work` each, all submitted at once, on `workers` × `slots`.
    private func jobWorkload(tasks count: Int, workers: Int, work: Duration, logger: Logger) async throws -> BenchReport
    {
        let (name, slots) = (self.workload.rawValue, self.slots)
        return try await self.withWarmCluster(workers: workers, logger: logger) { coordinator, setup in
            let run = try await measureJob(coordinator, (1...count).map { ScanTask.sector($0, work: work) })
            var report = BenchReport(workload: name, run: run, setup: setup)
            report.settings["work_ms"] = Int(work.seconds * 1000)
            if work > .zero {
                let ideal = Double(count) * work.seconds / Double(max(1, workers * slots))
                report.extra["makespan_s"] = run.wall.seconds
                report.extra["ideal_s"] = ideal
                report.extra["efficiency"] = ideal / run.wall.seconds
            }
            if name == "scale" {
                report.extra["workers_registered"] = (await coordinator.brokerStatus())?.workers.count ?? 0
            }
            return report
        }
    }

    /// The same tasks without failures, then with every 10th attempt failing (retried by the default
    /// policy, backoff included), then failing the same way but retried at once.
    ///
    /// The last run separates what handling failures costs from the time the policy chooses to wait
    /// (0–10 ms before a 2nd attempt, 0–20 ms before a 3rd): fixed delays that weigh the more the
    /// shorter the run without failures is.
    private func failures(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 1_000
        return try await self.withWarmCluster(workers: self.workers ?? 1, logger: logger) { coordinator, setup in
            let clean = try await measureJob(coordinator, (1...count).map { ScanTask.sector($0) })
            let failing = try await measureJob(coordinator, (1...count).map { ScanTask.sector($0, failEvery: 10) })
            // Other sectors: the sector scanner never fails a sector twice in a row in one process, and
            // the same sectors in the same order would meet every 10th attempt on the sectors that just
            // failed, so they would not fail at all.
            let immediate = try await Coordinator.withCoordinator(
                configuration: CoordinatorConfiguration(
                    broker: coordinator.broker,
                    retry: RetryPolicy(placement: .local, maxAttempts: 3, backoff: .none)
                ),
                reactor: coordinator.reactor,
                logger: logger
            ) { immediateCoordinator in
                _ = try await measureJob(immediateCoordinator, (1...200).map { ScanTask.sector($0) })
                return try await measureJob(
                    immediateCoordinator,
                    ((count + 1)...(2 * count)).map { ScanTask.sector($0, failEvery: 10) }
                )
            }
            var report = BenchReport(workload: "failures", run: failing, setup: setup)
            report.settings["fail_every"] = 10
            report.extra["wall_without_failures_s"] = clean.wall.seconds
            report.extra["wall_ratio"] = failing.wall.seconds / max(clean.wall.seconds, 1e-9)
            report.extra["retried"] = failing.summary.retried
            report.extra["wall_without_backoff_s"] = immediate.wall.seconds
            report.extra["wall_ratio_without_backoff"] = immediate.wall.seconds / max(clean.wall.seconds, 1e-9)
            report.extra["completed_without_backoff"] = immediate.summary.completed
            report.extra["retried_without_backoff"] = immediate.summary.retried
            return report
        }
    }

    /// Sequential round trips: submit one task, wait for its result.
    private func latency(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 2_000
        return try await self.withWarmCluster(workers: self.workers ?? 1, logger: logger) { coordinator, setup in
            let clock = ContinuousClock()
            let start = clock.now
            var latencies: [Duration] = []
            latencies.reserveCapacity(count)
            var summary = try await roundTrips(coordinator, count: count, latencies: &latencies)
            summary.wall = clock.now - start
            return BenchReport(
                workload: "latency",
                run: JobRun(wall: summary.wall, latencies: latencies, summary: summary),
                setup: setup
            )
        }
    }

    private func memory(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 1_000_000
        let cluster = try await BenchCluster(polling: self.polling)
        defer { cluster.stop() }
        let clock = ContinuousClock()
        let start = clock.now
        let (frontend, brokerPID) = (cluster.frontend, cluster.broker.pid)
        let (wall, accepted) = try await withReactor(name: "bench", idleSpin: self.polling.idleSpin.duration) {
            reactor in
            try await Coordinator.withCoordinator(
                configuration: CoordinatorConfiguration(broker: frontend),
                reactor: reactor,
                logger: logger
            ) { coordinator in
                try await measureAccepted(coordinator, (1...count).map { ScanTask.sector($0) }) {
                    Accepted(
                        brokerRSS: processResidentBytes(of: brokerPID),
                        clientRSS: processResidentBytes(of: getpid())
                    )
                }
            }
        }
        var summary = JobSummary()
        summary.tasks = count
        summary.wall = wall
        var report = BenchReport(
            workload: "memory",
            run: JobRun(wall: wall, latencies: [], summary: summary),
            setup: clock.now - start - wall
        )
        report.extra["broker_rss_mib"] = Double(accepted.brokerRSS) / 1_048_576
        report.extra["coordinator_rss_mib"] = Double(accepted.clientRSS) / 1_048_576
        report.extra["accepted_per_s"] = Double(count) / wall.seconds
        report.settings = ["workers": 0]
        report.countsAccepted = true
        return report
    }

    private func journal(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 20_000
        var memoryRates: [Double] = []
        var durableRates: [Double] = []
        for _ in 0..<self.rounds {
            for durable in [false, true] {
                let journalDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(
                    "skynet-bench-journal-\(UUID())"
                )
                try FileManager.default.createDirectory(at: journalDirectory, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: journalDirectory) }
                let arguments = durable ? ["--journal", journalDirectory.appendingPathComponent("j").path] : []
                let cluster = try await BenchCluster(brokerArguments: arguments, polling: self.polling)
                defer { cluster.stop() }
                let frontend = cluster.frontend
                let (wall, _) = try await withReactor(name: "bench", idleSpin: self.polling.idleSpin.duration) {
                    reactor in
                    try await Coordinator.withCoordinator(
                        configuration: CoordinatorConfiguration(broker: frontend),
                        reactor: reactor,
                        logger: logger
                    ) { coordinator in
                        try await measureAccepted(coordinator, (1...count).map { ScanTask.sector($0) })
                    }
                }
                let rate = Double(count) / wall.seconds
                if durable { durableRates.append(rate) } else { memoryRates.append(rate) }
            }
        }
        var summary = JobSummary()
        summary.tasks = count
        let medianDurable = median(durableRates)
        summary.wall = .seconds(Double(count) / max(medianDurable, 1e-9))
        var report = BenchReport(
            workload: "journal",
            run: JobRun(wall: summary.wall, latencies: [], summary: summary),
            setup: .zero
        )
        report.extra["accepted_per_s_memory"] = median(memoryRates)
        report.extra["accepted_per_s_durable"] = medianDurable
        report.extra["durable_over_memory"] = medianDurable / max(median(memoryRates), 1e-9)
        report.extra["runs_memory"] = memoryRates
        report.extra["runs_durable"] = durableRates
        report.settings = ["workers": 0, "rounds": self.rounds]
        report.countsAccepted = true
        return report
    }
}

// MARK: Measuring

/// One timed job: its wall time, each final result's time since the submit, and its summary.
struct JobRun {
    var wall: Duration
    var latencies: [Duration]
    var summary: JobSummary
}

/// `count` sequential round trips (submit one task, wait for its result: `Coordinator.run`), each
/// timed into `latencies`. The loop runs isolated to the coordinator, as a single-threaded client
/// would: the result resumes it on the coordinator's reactor, with no hop between executors.
func roundTrips(
    _ coordinator: isolated Coordinator,
    count: Int,
    latencies: inout [Duration]
) async throws -> JobSummary {
    let clock = ContinuousClock()
    var summary = JobSummary()
    for sector in 1...count {
        let task = ScanTask.sector(sector)
        let start = clock.now
        let result = try await coordinator.run(task)
        latencies.append(clock.now - start)
        summary.tasks += 1
        if result.status == .completed { summary.completed += 1 } else { summary.failed += 1 }
    }
    return summary
}

/// Submits `tasks` as one job and times it until the last final result is in hand.
func measureJob(_ coordinator: Coordinator, _ tasks: [ScanTask]) async throws -> JobRun {
    let clock = ContinuousClock()
    let start = clock.now
    var latencies: [Duration] = []
    latencies.reserveCapacity(tasks.count)
    for try await batch in try await coordinator.submit(tasks) {
        let now = clock.now
        for event in batch {
            if case .final = event { latencies.append(now - start) }
        }
    }
    return JobRun(wall: clock.now - start, latencies: latencies, summary: await coordinator.summary)
}

struct Accepted: Sendable {
    var brokerRSS = 0
    var clientRSS = 0
}

/// Submits `tasks` to a broker without workers and times it until every one is ACCEPTED; then
/// reads the broker's and this process's resident memory.
func measureAccepted(
    _ coordinator: Coordinator,
    _ tasks: [ScanTask],
    probe: @Sendable () -> Accepted = { Accepted() }
) async throws -> (Duration, Accepted) {
    let clock = ContinuousClock()
    let start = clock.now
    var accepted = 0
    var wall = Duration.zero
    for try await batch in try await coordinator.submit(tasks) {
        for case .accepted(let count) in batch { accepted += count }
        if accepted >= tasks.count {
            wall = clock.now - start
            break
        }
    }
    guard accepted >= tasks.count else { throw BenchError("only \(accepted) of \(tasks.count) tasks were accepted") }
    return (wall, probe())
}

/// Starts the cluster (processes, or in this process), waits for it, runs `body`, stops it.
func withBenchCluster(
    workers: Int,
    slots: Int,
    inProcess: Bool,
    polling: ReactorOptions,
    logger: Logger,
    _ body: @escaping @Sendable (String, ContinuousClock.Instant) async throws -> BenchReport
) async throws -> BenchReport {
    let clock = ContinuousClock()
    let start = clock.now
    if inProcess {
        let context = try ZMQContext()
        let reactor = try Reactor(context: context, name: "bench-cluster", idleSpin: polling.idleSpin.duration)
        defer {
            reactor.shutdown()
            context.terminate()
        }
        return try await EmbeddedCluster.run(workers: workers, slots: slots, reactor: reactor, logger: logger) {
            endpoints in
            try await body(endpoints.frontend, start)
        }
    }
    let cluster = try await BenchCluster(polling: polling)
    defer { cluster.stop() }
    try cluster.addWorkers(workers, slots: slots)
    var report = try await body(cluster.frontend, start)
    report.extra["broker_rss_mib"] = Double(cluster.broker.residentBytes) / 1_048_576
    return report
}

/// A coordinator on its own reactor that has seen `workers` workers register; `setup` time ends then.
func withBenchCoordinator(
    endpoint: String,
    workers: Int,
    started: ContinuousClock.Instant,
    polling: ReactorOptions,
    logger: Logger,
    _ body: @escaping @Sendable (Coordinator, Duration) async throws -> BenchReport
) async throws -> BenchReport {
    try await withReactor(name: "bench", idleSpin: polling.idleSpin.duration) { reactor in
        try await Coordinator.withCoordinator(
            configuration: CoordinatorConfiguration(broker: endpoint),
            reactor: reactor,
            logger: logger
        ) { coordinator in
            let deadline = ContinuousClock.now + .seconds(60)
            while true {
                let registered = await coordinator.brokerStatus(timeout: .seconds(2))?.workers.count ?? 0
                if registered >= workers { break }
                guard ContinuousClock.now < deadline else {
                    throw BenchError("only \(registered) of \(workers) workers registered within 60 s")
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            // The client's loop runs on the coordinator's reactor (it only awaits), so a submit and its
            // results need no hand-off between the reactor and the global pool.
            return try await withTaskExecutorPreference(reactor) {
                try await body(coordinator, ContinuousClock.now - started)
            }
        }
    }
}

// MARK: Reporting

struct BenchReport {
    let workload: String
    let run: JobRun
    /// Start-up until the workers were registered (not timed in wall_s).
    var setup: Duration
    var settings: [String: any Sendable] = [:]
    var extra: [String: any Sendable] = [:]
    /// The workload counts accepted tasks, not results.
    var countsAccepted = false

    init(workload: String, run: JobRun, setup: Duration) {
        self.workload = workload
        self.run = run
        self.setup = setup
    }

    var failedRun: Bool { !self.countsAccepted && self.run.summary.completed != self.run.summary.tasks }

    func percentile(_ p: Double) -> Double {
        guard !self.run.latencies.isEmpty else { return 0 }
        let sorted = self.run.latencies.sorted()
        let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
        return sorted[max(0, index)].seconds * 1e6
    }

    var fields: [String: Any] {
        let summary = self.run.summary
        var fields: [String: Any] = [
            "workload": self.workload,
            "wall_s": rounded(self.run.wall.seconds),
            "tasks": summary.tasks,
            "completed": summary.completed,
            "failed": summary.failed,
            "tasks_per_s": rounded(Double(summary.tasks) / max(self.run.wall.seconds, 1e-9)),
            "p50_us": rounded(self.percentile(0.50)),
            "p99_us": rounded(self.percentile(0.99)),
            "setup_s": rounded(self.setup.seconds),
            "settings": self.settings.mapValues(jsonValue),
        ]
        for (key, value) in self.extra { fields[key] = jsonValue(value) }
        return fields
    }

    func json() -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: self.fields, options: [.sortedKeys]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }

    func human() -> String {
        let fields = self.fields
        var lines = [
            "\(self.workload): \(fields["tasks"]!) tasks in \(fields["wall_s"]!) s, \(fields["tasks_per_s"]!) tasks/s"
        ]
        if !self.run.latencies.isEmpty {
            lines.append("  latency p50 \(fields["p50_us"]!) µs, p99 \(fields["p99_us"]!) µs")
        }
        for key in self.extra.keys.sorted() { lines.append("  \(key): \(fields[key]!)") }
        lines.append("  setup \(fields["setup_s"]!) s; settings \(self.settings.mapValues(jsonValue))")
        return lines.joined(separator: "\n")
    }
}

private func jsonValue(_ value: any Sendable) -> Any {
    switch value {
    case let value as Double: return rounded(value)
    case let value as [Double]: return value.map(rounded)
    default: return value
    }
}

private func rounded(_ value: Double) -> Double {
    guard value.isFinite else { return 0 }
    return (value * 1000).rounded() / 1000
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

extension Duration {
    var seconds: Double {
        let (whole, atto) = self.components
        return Double(whole) + Double(atto) / 1e18
    }
}
