import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import ZeroMQ

// The journal workload: what each durable mode costs (none, the file, etcd in HA mode).
extension BenchCommand {
    func journal(logger: Logger) async throws -> BenchReport {
        let count = self.tasks ?? 20_000
        var memoryRates: [Double] = []
        var durableRates: [Double] = []
        var etcdRates: [Double] = []
        var throughputs: [String: [Double]] = [:]
        var latencies: [String: [Double]] = [:]
        // HA mode on three etcd members on this machine, when Debian's etcd is installed.
        let etcd: LocalEtcd? = LocalEtcd.available ? try await LocalEtcd(count: 3) : nil
        // (Killed by its deinit if a round throws.)
        var cluster = 0
        for _ in 0..<self.rounds {
            for mode in etcd == nil ? ["memory", "file"] : ["memory", "file", "etcd"] {
                let journalDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(
                    "skynet-bench-journal-\(UUID())"
                )
                try FileManager.default.createDirectory(at: journalDirectory, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: journalDirectory) }
                var arguments: [String] = []
                if mode == "file" { arguments = ["--journal", journalDirectory.appendingPathComponent("j").path] }
                if mode == "etcd", let etcd {
                    // A group of its own each round (a fresh journal), on fixed ports as HA mode needs.
                    cluster += 1
                    let ports = try LocalEtcd.freePorts(2)
                    arguments = [
                        "--etcd", etcd.endpoints.joined(separator: ","), "--cluster", "bench-\(getpid())-\(cluster)",
                        "--frontend", "tcp://127.0.0.1:\(ports[0])", "--backend", "tcp://127.0.0.1:\(ports[1])",
                    ]
                }
                let polling = self.polling
                let (wall, throughput, p50) = try await BenchCluster.with(brokerArguments: arguments, polling: polling)
                {
                    cluster in
                    if mode == "etcd" {
                        guard
                            await cluster.broker.waitForStderr(
                                timeout: .seconds(20),
                                { $0.contains("leading: serving") }
                            )
                        else { throw BenchError("the HA broker did not lead: \(cluster.broker.stderr.suffix(500))") }
                    }
                    let frontend = cluster.frontend
                    // Accepted alone (no workers): what the journal costs a SUBMIT.
                    let wall = try await withReactor(name: "bench", idleSpin: polling.idleSpin.duration) { reactor in
                        try await Coordinator.withCoordinator(
                            configuration: CoordinatorConfiguration(
                                broker: frontend,
                                security: BenchCommand.keys?.coordinator
                            ),
                            reactor: reactor,
                            logger: logger,
                            scanners: cliScanners
                        ) { coordinator in
                            try await measureAccepted(coordinator, (1...count).map { ScanTask.sector($0) })
                        }
                    }.0
                    // Then whole tasks on 2 workers × 4 slots: throughput, and one task at a time's latency.
                    try cluster.addWorkers(2, slots: 4)
                    let started = ContinuousClock.now
                    let report = try await withBenchCoordinator(
                        endpoint: frontend,
                        workers: 2,
                        started: started,
                        polling: polling,
                        logger: logger
                    ) { coordinator, _ in
                        let run = try await measureJob(coordinator, (1...count).map { ScanTask.sector($0) })
                        var latencies: [Duration] = []
                        _ = try await roundTrips(coordinator, count: 200, client: .run, latencies: &latencies)
                        var report = BenchReport(
                            workload: "journal",
                            run: JobRun(wall: run.wall, latencies: latencies, summary: run.summary),
                            setup: .zero
                        )
                        report.extra["p50"] = report.percentile(0.5) / 1000
                        return report
                    }
                    return (wall, Double(count) / report.run.wall.seconds, report.extra["p50"] as? Double ?? 0)
                }
                let rate = Double(count) / wall.seconds
                switch mode {
                case "memory": memoryRates.append(rate)
                case "file": durableRates.append(rate)
                default: etcdRates.append(rate)
                }
                throughputs[mode, default: []].append(throughput)
                latencies[mode, default: []].append(p50)
            }
        }
        await etcd?.stop()
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
        for (mode, rates) in throughputs {
            report.extra["tasks_per_s_\(mode)"] = median(rates)
            report.extra["runs_tasks_per_s_\(mode)"] = rates
        }
        for (mode, values) in latencies { report.extra["p50_ms_\(mode)"] = median(values) }
        if !etcdRates.isEmpty {
            report.extra["accepted_per_s_etcd"] = median(etcdRates)
            report.extra["etcd_over_file"] = median(etcdRates) / max(medianDurable, 1e-9)
            report.extra["etcd_over_memory"] = median(etcdRates) / max(median(memoryRates), 1e-9)
            report.extra["runs_etcd"] = etcdRates
        }
        report.settings = ["workers": 0, "rounds": self.rounds]
        report.countsAccepted = true
        return report
    }
}
