import Foundation
import SkyNet
import SkyNetCLI
import Testing

/// Broker restarts, durable mode and the chaos suite: real processes, real SIGKILL, a real journal.
/// An extension of ``EndToEndTests`` so that it is serialized with the other process tests.
extension EndToEndTests {
    @Test("broker SIGKILLed mid-run and restarted without a journal: the coordinator sends its unfinished tasks again")
    func brokerRestartInMemory() async throws {
        let cluster = try await Cluster(workers: 2)
        let submit = try cluster.submit(["--sectors", "120", "--work", "50ms", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 20 })
        try await cluster.killAndRestartBroker()
        let status = await submit.waitForExit(timeout: .seconds(60))
        // The workers noticed the new broker and registered with it.
        let registered = try await cluster.waitForStatus(timeout: .seconds(10)) { $0.workersRegistered == 2 }
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        #expect(registered, "\(cluster.broker.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 120)
        #expect(Set(results.map(\.id)).count == 120, "one final result per task")
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(summary.completed == 120)
        #expect(submit.stderr.contains("broker restarted"), "\(submit.stderr)")
    }

    @Test("durable broker SIGKILLed mid-run: accepted tasks are queued again from the journal, all complete once")
    func durableBrokerRestart() async throws {
        let journal = try JournalPath()
        let cluster = try await Cluster(workers: 2, brokerExtra: ["--journal", journal.path])
        let submit = try cluster.submit(["--sectors", "300", "--work", "20ms", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 40 })
        try await cluster.killAndRestartBroker()
        let status = await submit.waitForExit(timeout: .seconds(60))
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 300)
        #expect(Set(results.map(\.id)).count == 300, "one final result per task")
        #expect(Set(results.compactMap(\.sector)) == Set(1...300))
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(summary.completed == 300)
        // The restarted broker found the accepted, unfinished tasks on disk and queued them again.
        let log = cluster.broker.stderr
        let queued = Cluster.field("queued", in: log).flatMap(Int.init) ?? 0
        let records = Cluster.field("records", in: log).flatMap(Int.init) ?? 0
        #expect(queued > 0 && records > 0, "\(log)")
        // A second broker on the same journal is refused with a one-line error while the first runs.
        let arguments = ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"]
        let holder = try Spawned(arguments + ["--journal", journal.path], name: "holder")
        #expect(await holder.listeningEndpoints(timeout: .seconds(10)) != nil, "\(holder.stderr)")
        let intruder = try Spawned(arguments + ["--journal", journal.path], name: "intruder")
        let refused = await intruder.waitForExit(timeout: .seconds(10))
        _ = await holder.stop()
        #expect(refused != nil && refused != 0)
        #expect(intruder.stderr.contains("in use by another broker"), "\(intruder.stderr)")
    }
}

extension EndToEndTests {
    @Test(
        "a journal write that fails (a full disk) stops the durable broker at once: exit 74, nothing more acknowledged",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs for the journal")
    )
    func journalDiskFull() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-full-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", directory.path])
        defer {
            _ = try? runCommand("/bin/umount", [directory.path])
            try? FileManager.default.removeItem(at: directory)
        }
        let cluster = try await Cluster(
            workers: 1,
            brokerExtra: ["--journal", directory.appendingPathComponent("j").path]
        )
        // About a thousand SUBMIT records fill 64 KiB: the writer's write fails with ENOSPC.
        let submit = try cluster.submit(["--sectors", "3000", "--work", "1ms", "--fail-every", "0", "--json"])
        let brokerExit = await cluster.broker.waitForExit(timeout: .seconds(30))
        // The stopping broker says goodbye: the coordinator runs the rest itself at once instead of
        // waiting out 15 s of silence, and the worker hears it too.
        let stopped = ContinuousClock.now
        let submitExit = await submit.waitForExit(timeout: .seconds(30))
        let heard = ContinuousClock.now - stopped
        submit.signal(SIGKILL)
        await cluster.shutdown()
        #expect(brokerExit == 74, "broker: \(cluster.broker.stderr.suffix(1500))")
        #expect(cluster.broker.stderr.contains("No space left on device"), "\(cluster.broker.stderr.suffix(1500))")
        #expect(cluster.broker.stderr.contains("restart it on the same journal"))
        #expect(submitExit == 0, "submit: \(submit.stderr.suffix(1500))")
        #expect(heard < .seconds(8), "the coordinator heard the stop after \(heard)")
        #expect(submit.stderr.contains("journal failed"), "\(submit.stderr.suffix(1500))")
        #expect(cluster.workers[0].stderr.contains("journal failed"), "\(cluster.workers[0].stderr.suffix(1500))")
    }
}

/// A journal path in a fresh temporary directory, removed when done.
final class JournalPath {
    let directory: URL
    var path: String { self.directory.appendingPathComponent("broker.journal").path }

    init() throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-journal-\(UUID())")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: self.directory) }
}

extension EndToEndTests {
    /// `make chaos` runs it with 10,000 tasks (`SKYNET_CHAOS_TASKS`); `make test` with the same
    /// default, bounded by a deadline.
    @Test(
        "chaos, with CURVE: workers SIGKILLed every 2 s and restarted, the durable broker SIGKILLed once; nothing lost"
    )
    func chaos() async throws {
        let environment = ProcessInfo.processInfo.environment
        let total = environment["SKYNET_CHAOS_TASKS"].flatMap(Int.init) ?? 10_000
        let journal = try JournalPath()
        let cluster = try await Cluster(workers: 0, brokerExtra: ["--journal", journal.path], curve: true)
        let debug = ["--log-level", "debug"]
        for index in 0..<4 { try await cluster.addWorker(name: "chaos-\(index)", extra: debug) }
        let clock = ContinuousClock()
        let start = clock.now
        let submit = try cluster.submit(["--sectors", "\(total)", "--work", "10ms", "--json"])
        var generator = SystemRandomNumberGenerator()
        var workerKills = 0
        var brokerRecovery: Duration?
        var rejoin: Duration?
        let deadline = start + .seconds(600)
        while submit.isRunning, clock.now < deadline {
            try await Task.sleep(for: .seconds(2))
            guard submit.isRunning else { break }
            if brokerRecovery == nil, clock.now - start > .seconds(5) {
                // Once: kill -9 the durable broker and start it again on the same journal.
                let killed = clock.now
                try await cluster.killAndRestartBroker()
                brokerRecovery = clock.now - killed
                let live = cluster.workers.filter(\.isRunning).count
                if try await cluster.waitForStatus(timeout: .seconds(10), { $0.workers.count >= live }) {
                    rejoin = clock.now - killed
                }
                continue
            }
            let alive = cluster.workers.indices.filter { cluster.workers[$0].isRunning }
            guard let victim = alive.randomElement(using: &generator) else { continue }
            let name = cluster.workers[victim].name
            cluster.workers[victim].signal(SIGKILL)
            _ = await cluster.workers[victim].waitForExit(timeout: .seconds(5))
            workerKills += 1
            try await cluster.addWorker(name: name, extra: debug)
        }
        let status = await submit.waitForExit(timeout: .seconds(5))
        let wall = clock.now - start
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr.suffix(2000))")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        let ids = Set(results.map(\.id))
        #expect(results.count == total, "exactly one final result per task")
        #expect(ids.count == total, "no task reported twice")
        #expect(Set(results.compactMap(\.sector)) == Set(1...total), "no task lost")
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(workerKills >= 1 && brokerRecovery != nil, "the chaos happened")
        // Executions, from every worker's log (killed ones included): at-least-once, reported.
        var executions: [String: Int] = [:]
        for worker in cluster.workers {
            for line in worker.stderr.split(separator: "\n") where line.contains("scan started") {
                if let id = Cluster.field("task.id", in: String(line)) { executions[id, default: 0] += 1 }
            }
        }
        let local = results.filter { $0.system == "local" }.count
        let twice = executions.values.filter { $0 > 1 }.count
        print(
            """
            chaos: tasks=\(total) final=\(results.count) lost=\(total - ids.count) \
            executed_more_than_once=\(twice) executions=\(executions.values.reduce(0, +)) local_runs=\(local) \
            requeued=\(summary.requeued) duplicates_dropped=\(summary.duplicates) worker_kills=\(workerKills) \
            broker_restart_s=\(brokerRecovery.map(seconds) ?? "-") \
            workers_rejoined_s=\(rejoin.map(seconds) ?? "-") \
            wall_s=\(seconds(wall))
            """
        )
    }

    @Test("SIGTERM with a drain timeout: the running tasks are handed back and run elsewhere, none fails")
    func drainTimeoutHandsBack() async throws {
        let cluster = try await Cluster(workers: 0)
        let slow = try await cluster.addWorker(name: "slow", extra: ["--drain-timeout", "300ms"])
        let submit = try cluster.submit(["--sectors", "4", "--work", "3s", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 4 })
        try await cluster.addWorker(name: "spare")
        slow.signal(SIGTERM)
        #expect(await slow.waitForExit(timeout: .seconds(5)) == 0, "drained worker exits 0: \(slow.stderr)")
        #expect(slow.stderr.contains("handing the running tasks back"))
        let status = await submit.waitForExit(timeout: .seconds(30))
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 4 && results.allSatisfy { $0.status == "completed" && $0.system == "spare" })
        #expect(summary.requeued == 4 && summary.failed == 0)
    }
}

/// A duration in seconds, three decimals.
func seconds(_ duration: Duration) -> String {
    let (whole, atto) = duration.components
    return String(format: "%.3f", Double(whole) + Double(atto) / 1e18)
}

extension EndToEndTests {
    @Test("a worker with every slot busy on CPU-bound scans still heartbeats on time and is not declared dead")
    func heartbeatsUnderLoad() async throws {
        let cluster = try await Cluster(workers: 0, brokerExtra: ["--heartbeat", "200ms"])
        try await cluster.addWorker(name: "busy", extra: ["--heartbeat", "200ms"])
        let submit = try cluster.submit(["--sectors", "8", "--work", "1200ms", "--cpu-bound", "--json"])
        let status = await submit.waitForExit(timeout: .seconds(60))
        let broker = try await cluster.status()
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, _) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 8)
        #expect(results.allSatisfy { $0.system == "busy" && $0.attempts == 1 }, "no attempt lost to an expiry")
        // Never declared lost, so it never had to register again.
        #expect(broker.workersLost == 0 && broker.requeued == 0 && broker.workersRegistered == 1, "\(broker)")
    }

    @Test("--timeout: scans past their deadline are cancelled and reported as timed out, sleeping or spinning")
    func deadlines() async throws {
        let cluster = try await Cluster(workers: 1)
        for extra in [[], ["--cpu-bound"]] {
            let clock = ContinuousClock()
            let start = clock.now
            let submit = try cluster.submit(
                ["--sectors", "4", "--work", "20s", "--timeout", "300ms", "--retry", "none", "--json"] + extra
            )
            let status = await submit.waitForExit(timeout: .seconds(30))
            #expect(clock.now - start < .seconds(10), "deadlines end the scans long before their 20 s of work")
            #expect(status == 4, "a job exits with the number of tasks that did not complete")
            let (results, summary) = try parseJSONOutput(submit.stdout)
            #expect(results.count == 4 && summary.failed == 4)
            #expect(results.allSatisfy { $0.status == "failed" && $0.error == "timed out" }, "\(submit.stdout)")
        }
        await cluster.shutdown()
    }
}

extension EndToEndTests {
    @Test("Ctrl-C on submit cancels its queued and running tasks, prints the partial summary and exits 130")
    func interruptCancels() async throws {
        let cluster = try await Cluster(workers: 1)
        let submit = try cluster.submit(["--sectors", "40", "--work", "400ms", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 4 })
        submit.signal(SIGINT)
        let status = await submit.waitForExit(timeout: .seconds(10))
        // Nothing of the job is left at the broker or on the worker.
        let idle = try await cluster.waitForStatus(timeout: .seconds(5)) { $0.queued == 0 && $0.leased == 0 }
        let snapshot = try await cluster.status()
        await cluster.shutdown()
        #expect(status == 130, "submit: \(submit.stderr)")
        #expect(idle, "broker still holds tasks: \(snapshot)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 40, "every task has its one final result")
        #expect(Set(results.map(\.id)).count == 40)
        let completed = results.filter { $0.status == "completed" }.count
        let cancelled = results.filter { $0.status == "cancelled" }.count
        #expect(completed >= 4 && cancelled > 0 && completed + cancelled == 40)
        #expect(summary.completed == completed && summary.cancelled == cancelled && summary.failed == 0)
        #expect(submit.stderr.contains("Interrupted: cancelling the job"), "\(submit.stderr)")
    }

    @Test("tasks that fail every attempt are retried with backoff and listed in the dead-letter report")
    func deadLetterReport() async throws {
        let cluster = try await Cluster(workers: 1)
        let submit = try cluster.submit([
            "--sectors", "6", "--work", "1ms", "--fail-every", "1", "--max-attempts", "3", "--backoff", "200ms",
            "--json",
        ])
        let status = await submit.waitForExit(timeout: .seconds(30))
        await cluster.shutdown()
        #expect(status == 6, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 6 && results.allSatisfy { $0.status == "failed" && $0.attempts == 3 })
        #expect(summary.failed == 6 && summary.retried == 12)
        #expect(Set(summary.dead_letter.map(\.id)) == Set(results.map(\.id)))
        #expect(summary.dead_letter.allSatisfy { $0.attempts == 3 && $0.error.contains("UnreliableAPI") })
        // Two backoffs per task, of 0–200 ms then 0–400 ms, six tasks side by side. The longest of
        // six such sums is under 150 ms with a probability below 1e-5 (one sum is, with 0.14), and
        // without backoff the job takes a few milliseconds.
        #expect(summary.wall_s >= 0.15, "wall \(summary.wall_s) s")
    }
}

extension EndToEndTests {
    @Test("SIGTERM on the broker: it dispatches nothing more, waits for the running tasks' results, then exits 0")
    func brokerGracefulStop() async throws {
        let cluster = try await Cluster(workers: 1)
        let submit = try cluster.submit(["--sectors", "8", "--work", "1500ms", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 4 })
        cluster.broker.signal(SIGTERM)
        let brokerStatus = await cluster.broker.waitForExit(timeout: .seconds(10))
        let status = await submit.waitForExit(timeout: .seconds(30))
        await cluster.shutdown()
        #expect(brokerStatus == 0, "broker: \(cluster.broker.stderr)")
        #expect(cluster.broker.stderr.contains("running tasks finished"), "\(cluster.broker.stderr)")
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, _) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 8 && results.allSatisfy { $0.status == "completed" })
        // The 4 running tasks' results reached the coordinator; the 4 queued ones were never sent
        // to the worker and went to the retry policy (re-run locally).
        #expect(results.filter { $0.system == "worker-a" }.count == 4, "\(submit.stdout)")
        #expect(results.filter { $0.system == "local" }.count == 4, "\(submit.stdout)")
    }
}

/// The last line of `skynet results --json`.
struct JobLine: Decodable {
    let job: DetachedJobStatus
}

extension EndToEndTests {
    @Test(
        "detached job: submit --detach returns once accepted; results survive a broker kill -9 and --follow ends when done"
    )
    func detachedJob() async throws {
        let journal = try JournalPath()
        let cluster = try await Cluster(workers: 0, brokerExtra: ["--journal", journal.path])
        let submit = try cluster.submit([
            "--sectors", "30", "--work", "100ms", "--fail-every", "5", "--max-attempts", "5", "--detach", "--json",
        ])
        #expect(await submit.waitForExit(timeout: .seconds(15)) == 0, "submit: \(submit.stderr)")
        struct Detached: Decodable {
            let job: String
            let tasks: Int
        }
        let detached = try JSONDecoder().decode(Detached.self, from: Data(submit.stdout.utf8))
        #expect(detached.tasks == 30)
        // Nothing ran yet (no workers): every task is pending.
        let early = try Spawned(["results", detached.job, "--broker", cluster.frontend, "--json"], name: "results")
        #expect(await early.waitForExit(timeout: .seconds(10)) == 1, "pending job exits 1: \(early.stderr)")
        let pending = try JSONStyle.decoder.decode(JobLine.self, from: Data(early.stdout.utf8)).job
        #expect(pending.pending == 30 && pending.tasks == 30 && !pending.done)
        // Workers come, and the broker is SIGKILLed and restarted mid-job.
        try await cluster.addWorker(name: "worker-a")
        try await cluster.addWorker(name: "worker-b")
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 8 })
        try await cluster.killAndRestartBroker()
        let follow = try Spawned(
            ["results", detached.job, "--broker", cluster.frontend, "--follow", "--json"],
            name: "follow"
        )
        let status = await follow.waitForExit(timeout: .seconds(60))
        await cluster.shutdown()
        #expect(status != nil, "--follow ended")
        var results: [ResultLine] = []
        var final: DetachedJobStatus?
        for line in follow.stdout.split(separator: "\n") {
            if line.hasPrefix("{\"job\"") {
                final = try JSONStyle.decoder.decode(JobLine.self, from: Data(line.utf8)).job
            } else {
                results.append(try JSONDecoder().decode(ResultLine.self, from: Data(line.utf8)))
            }
        }
        #expect(results.count == 30 && Set(results.map(\.id)).count == 30, "one final result per task")
        #expect(Set(results.compactMap(\.sector)) == Set(1...30))
        #expect(final?.done == true && final?.tasks == 30 && final?.pending == 0)
        #expect((final?.completed ?? 0) + (final?.failed ?? 0) == 30)
        #expect(status == ((final?.failed ?? 1) == 0 ? 0 : 1))
        #expect(results.contains { $0.attempts > 1 }, "the broker retried failed attempts of the job")
    }

    @Test("skynet cancel JOB: queued tasks end at once, running ones on the worker; each is reported cancelled")
    func cancelDetachedJob() async throws {
        let journal = try JournalPath()
        let cluster = try await Cluster(workers: 1, brokerExtra: ["--journal", journal.path])
        let submit = try cluster.submit(["--sectors", "40", "--work", "2s", "--fail-every", "0", "--detach"])
        #expect(await submit.waitForExit(timeout: .seconds(15)) == 0, "submit: \(submit.stderr)")
        let job = submit.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 4 })
        let cancel = try Spawned(["cancel", job, "--broker", cluster.frontend], name: "cancel")
        #expect(await cancel.waitForExit(timeout: .seconds(10)) == 0, "cancel: \(cancel.stderr)")
        #expect(cancel.stdout.contains("cancelling"), "\(cancel.stdout)")
        let follow = try Spawned(["results", job, "--broker", cluster.frontend, "--follow", "--json"], name: "follow")
        let status = await follow.waitForExit(timeout: .seconds(15))
        let idle = try await cluster.waitForStatus(timeout: .seconds(5)) { $0.queued == 0 && $0.leased == 0 }
        await cluster.shutdown()
        #expect(status == 1, "a cancelled job is not a success: \(follow.stderr)")
        #expect(idle)
        let lines = follow.stdout.split(separator: "\n")
        let results = try lines.filter { !$0.hasPrefix("{\"job\"") }.map {
            try JSONDecoder().decode(ResultLine.self, from: Data($0.utf8))
        }
        #expect(results.count == 40 && Set(results.map(\.id)).count == 40)
        #expect(results.allSatisfy { $0.status == "cancelled" }, "nothing finished its 2 s before the cancel")
        // A broker without a journal refuses detached jobs with a one-line error.
        let plain = try await Cluster(workers: 0)
        let refused = try plain.submit(["--sectors", "3", "--detach"])
        let refusedStatus = await refused.waitForExit(timeout: .seconds(10))
        await plain.shutdown()
        #expect(refusedStatus != nil && refusedStatus != 0)
        #expect(refused.stderr.contains("durable broker"), "\(refused.stderr)")
    }
}

extension EndToEndTests {
    @Test("skynet bench smoke: throughput (processes, one process, CURVE), latency, failures, fairness, journal")
    func benchSmoke() async throws {
        for extra in [[], ["--in-process"], ["--curve"], ["--curve", "--in-process"]] {
            let bench = try Spawned(["bench", "throughput", "--tasks", "300", "--json"] + extra, name: "bench")
            let status = await bench.waitForExit(timeout: .seconds(60))
            #expect(status == 0, "bench: \(bench.stderr)")
            let line = bench.stdout.split(separator: "\n").last.map(String.init) ?? ""
            let report = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(report?["completed"] as? Int == 300, "\(line)")
            #expect((report?["tasks_per_s"] as? Double ?? 0) > 0)
            #expect(report?["p99_us"] != nil && report?["setup_s"] != nil && report?["wall_s"] != nil)
            let settings = report?["settings"] as? [String: Any]
            #expect(settings?["curve"] as? Bool == extra.contains("--curve"), "\(line)")
        }
        // fairness: the small job is done long before the big one (turns by coordinator).
        let fairness = try Spawned(["bench", "fairness", "--tasks", "2000", "--json"], name: "bench")
        #expect(await fairness.waitForExit(timeout: .seconds(60)) == 0, "bench fairness: \(fairness.stderr)")
        let fairnessLine = fairness.stdout.split(separator: "\n").last.map(String.init) ?? ""
        let fairnessReport = try JSONSerialization.jsonObject(with: Data(fairnessLine.utf8)) as? [String: Any]
        #expect(fairnessReport?["small_job_completed"] as? Int == 10, "\(fairnessLine)")
        let left = fairnessReport?["big_job_left_when_small_done_s"] as? Double ?? 0
        #expect(left > 0.2, "the small job finished only \(left) s before the big one: \(fairnessLine)")
        // latency, through Coordinator.runChain (the default) and through a loop of run(_:).
        for client in ["chain", "run"] {
            let latency = try Spawned(
                ["bench", "latency", "--tasks", "50", "--client", client, "--json"],
                name: "bench"
            )
            #expect(await latency.waitForExit(timeout: .seconds(60)) == 0, "bench latency: \(latency.stderr)")
            let latencyLine = latency.stdout.split(separator: "\n").last.map(String.init) ?? ""
            let latencyReport = try JSONSerialization.jsonObject(with: Data(latencyLine.utf8)) as? [String: Any]
            #expect(latencyReport?["completed"] as? Int == 50, "\(latencyLine)")
            #expect((latencyReport?["p50_us"] as? Double ?? 0) > 0, "\(latencyLine)")
            let settings = latencyReport?["settings"] as? [String: Any]
            #expect(settings?["client"] as? String == client, "\(latencyLine)")
        }
        // failures: both failing runs (the default policy's backoff, then none) really fail and retry.
        let failures = try Spawned(["bench", "failures", "--tasks", "200", "--json"], name: "bench")
        #expect(await failures.waitForExit(timeout: .seconds(60)) == 0, "bench failures: \(failures.stderr)")
        let failuresLine = failures.stdout.split(separator: "\n").last.map(String.init) ?? ""
        let failuresReport = try JSONSerialization.jsonObject(with: Data(failuresLine.utf8)) as? [String: Any]
        #expect(failuresReport?["completed"] as? Int == 200, "\(failuresLine)")
        #expect(failuresReport?["completed_without_backoff"] as? Int == 200, "\(failuresLine)")
        #expect((failuresReport?["retried"] as? Int ?? 0) > 0, "\(failuresLine)")
        #expect((failuresReport?["retried_without_backoff"] as? Int ?? 0) > 0, "\(failuresLine)")
        #expect((failuresReport?["wall_ratio"] as? Double ?? 0) > 0, "\(failuresLine)")
        #expect((failuresReport?["wall_ratio_without_backoff"] as? Double ?? 0) > 0, "\(failuresLine)")
        // typed: the typed no-op's outputs are checked by the workload itself; both rates are reported.
        let typed = try Spawned(["bench", "typed", "--tasks", "300", "--json"], name: "bench")
        #expect(await typed.waitForExit(timeout: .seconds(60)) == 0, "bench typed: \(typed.stderr)")
        let typedLine = typed.stdout.split(separator: "\n").last.map(String.init) ?? ""
        let typedReport = try JSONSerialization.jsonObject(with: Data(typedLine.utf8)) as? [String: Any]
        #expect(typedReport?["completed"] as? Int == 300, "\(typedLine)")
        #expect((typedReport?["typed_vs_raw"] as? Double ?? 0) > 0, "\(typedLine)")
        #expect((typedReport?["raw_tasks_per_s"] as? Double ?? 0) > 0, "\(typedLine)")
        let journal = try Spawned(["bench", "journal", "--tasks", "300", "--rounds", "1", "--json"], name: "bench")
        #expect(await journal.waitForExit(timeout: .seconds(60)) == 0, "bench journal: \(journal.stderr)")
        #expect(journal.stdout.contains("\"accepted_per_s_durable\""), "\(journal.stdout)")
    }
}
