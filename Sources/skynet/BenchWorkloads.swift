import ArgumentParser
import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import ZeroMQ

// The workloads `skynet bench` measures, each returning its report.
extension BenchCommand {

    /// Starts the broker and `workers` workers, waits until they are registered, warms up with 200
    /// untimed tasks, runs `body` with the coordinator and the setup time, and stops everything.
    func withWarmCluster(
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
    func jobWorkload(tasks count: Int, workers: Int, work: Duration, logger: Logger) async throws -> BenchReport {
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
    func failures(logger: Logger) async throws -> BenchReport {
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
                    retry: RetryPolicy(placement: .local, maxAttempts: 3, backoff: .none),
                    security: BenchCommand.keys?.coordinator
                ),
                reactor: coordinator.reactor,
                logger: logger,
                scanners: cliScanners
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
    func latency(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 2_000
        return try await self.withWarmCluster(workers: self.workers ?? 1, logger: logger) { coordinator, setup in
            let clock = ContinuousClock()
            let start = clock.now
            var latencies: [Duration] = []
            latencies.reserveCapacity(count)
            var summary = try await roundTrips(coordinator, count: count, client: self.client, latencies: &latencies)
            summary.wall = clock.now - start
            var report = BenchReport(
                workload: "latency",
                run: JobRun(wall: summary.wall, latencies: latencies, summary: summary),
                setup: setup
            )
            report.settings["client"] = self.client.rawValue
            return report
        }
    }

    /// The typed API's cost: N no-op tasks as raw bytes (`noop`, `[UInt8]` in and out through
    /// ``Coordinator/submit(_:)``), then N typed ones (`noop-int`, Int in and out through the typed
    /// ``Coordinator/submit(_:_:timeout:cache:)``, outputs decoded), alternating five times on one
    /// warm cluster; the report is the typed median and its ratio to the raw median.
    func typed(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 20_000
        return try await self.withWarmCluster(workers: self.workers ?? 1, logger: logger) { coordinator, setup in
            var raw: [Double] = []
            var typed: [Double] = []
            var typedRun: JobRun?
            let inputs = Array(1...count)
            for _ in 0..<5 {
                // Both sides are timed from their inputs: the raw side builds its tasks in the time.
                let clock = ContinuousClock()
                let rawStart = clock.now
                let tasks = inputs.map {
                    ScanTask(kind: RawNoop.kind, input: withUnsafeBytes(of: $0.littleEndian, Array.init))
                }
                _ = try await measureJob(coordinator, tasks)
                raw.append(Double(count) / (clock.now - rawStart).seconds)
                let start = clock.now
                var latencies: [Duration] = []
                latencies.reserveCapacity(count)
                var sum = 0
                for try await result in try await coordinator.submit(IntNoop(), inputs) {
                    sum &+= result.output ?? 0
                    latencies.append(clock.now - start)
                }
                let wall = clock.now - start
                guard sum == count * (count + 1) / 2 else { throw CLIError("typed no-op outputs are wrong") }
                typed.append(Double(count) / wall.seconds)
                typedRun = JobRun(wall: wall, latencies: latencies, summary: await coordinator.summary)
            }
            let median = { (values: [Double]) in values.sorted()[values.count / 2] }
            var report = BenchReport(workload: "typed", run: typedRun!, setup: setup)
            report.extra["typed_tasks_per_s"] = median(typed)
            report.extra["raw_tasks_per_s"] = median(raw)
            report.extra["typed_vs_raw"] = median(typed) / median(raw)
            return report
        }
    }

    /// Fair dispatch between coordinators: a 10,000-task job (2 ms a task on 1 worker × 4 slots, about
    /// 5 s) is submitted, then, once its tasks are running, a 10-task job from a second coordinator.
    /// With turns by coordinator the small job takes a few credit cycles (its ideal is 10 tasks on 4
    /// slots, 6 ms); behind a single FIFO it would wait for the big job's queue.
    func fairness(logger: Logger) async throws -> BenchReport {
        let big = self.tasks ?? 10_000
        let work = Duration.milliseconds(2)
        return try await self.withWarmCluster(workers: self.workers ?? 1, logger: logger) { coordinator, setup in
            let clock = ContinuousClock()
            let bigStart = clock.now
            async let bigRun = measureJob(coordinator, (1...big).map { ScanTask.sector($0, work: work) })
            // Wait until the big job's tasks are queued and running at the broker.
            while (await coordinator.brokerStatus())?.queued ?? 0 < big / 2 {
                try await Task.sleep(for: .milliseconds(5))
            }
            let small = try await Coordinator.withCoordinator(
                configuration: CoordinatorConfiguration(
                    broker: coordinator.broker,
                    security: BenchCommand.keys?.coordinator
                ),
                reactor: coordinator.reactor,
                logger: logger,
                scanners: cliScanners
            ) { smallCoordinator in
                try await measureJob(smallCoordinator, ((big + 1)...(big + 10)).map { ScanTask.sector($0, work: work) })
            }
            let smallEnd = clock.now
            let bigResult = try await bigRun
            var report = BenchReport(workload: "fairness", run: small, setup: setup)
            report.settings["big_tasks"] = big
            report.settings["work_ms"] = 2
            report.extra["small_job_s"] = small.wall.seconds
            report.extra["big_job_s"] = bigResult.wall.seconds
            report.extra["big_job_left_when_small_done_s"] = (bigResult.wall - (smallEnd - bigStart)).seconds
            report.extra["small_job_completed"] = small.summary.completed
            return report
        }
    }

    func memory(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 1_000_000
        let polling = self.polling
        return try await BenchCluster.with(polling: polling) { cluster in
            let clock = ContinuousClock()
            let start = clock.now
            let (frontend, brokerPID) = (cluster.frontend, cluster.broker.pid)
            let (wall, accepted) = try await withReactor(name: "bench", idleSpin: polling.idleSpin.duration) {
                reactor in
                try await Coordinator.withCoordinator(
                    configuration: CoordinatorConfiguration(broker: frontend, security: BenchCommand.keys?.coordinator),
                    reactor: reactor,
                    logger: logger,
                    scanners: cliScanners
                ) { coordinator in
                    try await measureAccepted(coordinator, (1...count).map { ScanTask.sector($0) }) {
                        Accepted(
                            brokerRSS: ChildProcess.residentBytes(of: brokerPID),
                            clientRSS: ChildProcess.residentBytes(of: getpid())
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
    }

}

// Measuring a job: its wall time, latencies and what was accepted.
// MARK: Measuring

/// One timed job: its wall time, each final result's time since the submit, and its summary.
struct JobRun {
    var wall: Duration
    var latencies: [Duration]
    var summary: JobSummary
}

/// `count` sequential round trips (submit one task, wait for its result), each timed into
/// `latencies`, by `client`: a loop of ``Coordinator/run(_:)`` calls, isolated to the coordinator as
/// a single-threaded client would be (the result resumes it on the coordinator's reactor, with no
/// hop between executors), or one ``Coordinator/runChain(_:next:)`` (each result starts the next
/// task on the reactor, with no Swift task suspended).
func roundTrips(
    _ coordinator: isolated Coordinator,
    count: Int,
    client: BenchCommand.Client,
    latencies: inout [Duration]
) async throws -> JobSummary {
    let clock = ContinuousClock()
    var summary = JobSummary()
    switch client {
    case .run:
        for sector in 1...count {
            let task = ScanTask.sector(sector)
            let start = clock.now
            let result = try await coordinator.run(task)
            latencies.append(clock.now - start)
            summary.tally(result)
        }
    case .chain:
        var sector = 1
        var start = clock.now
        try await coordinator.runChain(.sector(sector)) { result in
            latencies.append(clock.now - start)
            summary.tally(result)
            guard sector < count else { return nil }
            sector += 1
            start = clock.now
            return .sector(sector)
        }
    }
    return summary
}

extension JobSummary {
    /// Counts a round trip's final result: completed, or failed (cancelled counts as failed here).
    fileprivate mutating func tally(_ result: FinalResult) {
        self.tasks += 1
        if result.status == .completed { self.completed += 1 } else { self.failed += 1 }
    }
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
        return try await withReactor(name: "bench-cluster", idleSpin: polling.idleSpin.duration) { reactor in
            try await EmbeddedCluster.run(
                workers: workers,
                slots: slots,
                scanners: cliScanners,
                reactor: reactor,
                logger: logger,
                keys: BenchCommand.keys
            ) {
                endpoints in
                try await body(endpoints.frontend, start)
            }
        }
    }
    return try await BenchCluster.with(polling: polling) { cluster in
        try cluster.addWorkers(workers, slots: slots)
        var report = try await body(cluster.frontend, start)
        report.extra["broker_rss_mib"] = Double(cluster.broker.residentBytes) / 1_048_576
        return report
    }
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
            configuration: CoordinatorConfiguration(broker: endpoint, security: BenchCommand.keys?.coordinator),
            reactor: reactor,
            logger: logger,
            scanners: cliScanners
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
