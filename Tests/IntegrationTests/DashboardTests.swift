import Foundation
import SkyNet
import SkyNetCLI
import Testing

/// The broker's HTTP endpoint with real processes: `/metrics` read by real consumers (promtool,
/// prometheus_client) and equal to a job's figures, the token off loopback, garbage and slow
/// clients, and the dashboard in a real browser (Debian's chromium, driven by Selenium). An
/// extension of ``EndToEndTests``: serialized with the others.
extension EndToEndTests {
    /// The URL the broker printed (`{"http":"…"}`) on its standard output.
    static func dashboardURL(_ broker: Spawned) async -> String? {
        guard
            await broker.waitForStdout(timeout: .seconds(10), { $0.contains("{\"http\":\"") })
        else { return nil }
        let line = broker.stdout.split(separator: "\n").first { $0.hasPrefix("{\"http\":") } ?? ""
        return (try? JSONDecoder().decode([String: String].self, from: Data(line.utf8)))?["http"]
    }

    /// Runs a helper in `Tests/Browser` with python3 and returns its standard output's last line.
    static func python(
        _ script: String,
        _ arguments: [String],
        timeout: Duration = .seconds(120)
    ) async throws -> String {
        let path = SkynetBinary.packageRoot.appendingPathComponent("Tests/Browser/\(script)").path
        let process = try ChildProcess(
            executable: "/usr/bin/env",
            ["python3", path] + arguments,
            name: script,
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("skynet-tests-\(getpid())")
        )
        let status = await process.waitForExit(timeout: timeout)
        if status == nil { _ = await process.stop() }
        guard status == 0 else {
            throw TestFailure("\(script) failed (\(String(describing: status))): \(process.stderr.suffix(1500))")
        }
        return process.stdout.split(separator: "\n").last.map(String.init) ?? ""
    }

    /// Whether python3 can import `module`.
    static func hasPython(_ module: String) -> Bool {
        (try? runCommand("/usr/bin/env", ["python3", "-c", "import \(module)"])) != nil
    }

    struct Scrape: Decodable {
        let samples: [String: Double]
        let promtool: String
    }

    @Test(
        "HTTP: /metrics passes promtool, parses with prometheus_client, and equals the job's figures after a worker kill"
    )
    func metricsAfterAJob() async throws {
        guard Self.hasPython("prometheus_client") else {
            Issue.record("python3 cannot import prometheus_client: pip install prometheus_client (.ci/run does)")
            return
        }
        let journal = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(getpid()).journal")
        defer { try? FileManager.default.removeItem(at: journal) }
        let cluster = try await Cluster(
            workers: 0,
            brokerExtra: ["--http", "127.0.0.1:0", "--journal", journal.path]
        )
        let url = try #require(await Self.dashboardURL(cluster.broker), "\(cluster.broker.stdout)")
        let doomed = try await cluster.addWorker(name: "worker-a")
        try await cluster.addWorker(name: "worker-b")
        let submit = try cluster.submit([
            "--sectors", "40", "--work", "100ms", "--fail-every", "0", "--retry", "remote", "--json",
        ])
        #expect(
            try await cluster.waitForStatus(timeout: .seconds(10)) {
                $0.workers.contains { $0.name == "worker-a" && $0.leased > 0 }
            }
        )
        doomed.signal(SIGKILL)
        #expect(await submit.waitForExit(timeout: .seconds(60)) == 0, "\(submit.stderr)")
        let onB = try parseJSONOutput(submit.stdout).results.filter { $0.system == "worker-b" }.count
        let status = try await cluster.status()
        // The next heartbeat's figures (every second) and the next snapshot (every 250 ms).
        try await Task.sleep(for: .milliseconds(1500))
        let scrape = try JSONDecoder().decode(
            Scrape.self,
            from: Data(try await Self.python("metrics.py", [url + "metrics"]).utf8)
        )
        #expect(scrape.promtool == "ok" || scrape.promtool == "missing", "promtool: \(scrape.promtool)")
        if ProcessInfo.processInfo.environment["CI"] == "true" { #expect(scrape.promtool == "ok") }
        let samples = scrape.samples
        #expect(samples["skynet_tasks_submitted_total{}"] == 40)
        #expect(samples["skynet_task_results_total{status=completed}"] == 40, "\(samples)")
        #expect(samples["skynet_task_results_total{status=failed}"] == 0)
        #expect(samples["skynet_tasks_requeued_total{}"] == Double(status.requeued) && status.requeued >= 1)
        #expect(samples["skynet_workers_lost_total{}"] == 1)
        #expect(samples["skynet_workers{state=ready}"] == 1)
        #expect(samples["skynet_worker_slots{worker=worker-b}"] == 4)
        #expect(samples["skynet_worker_slots{worker=worker-a}"] == nil, "a lost worker's gauges go")
        #expect((samples["skynet_process_resident_memory_bytes{}"] ?? 0) > 1_000_000)
        // Each worker's own figures, from its heartbeats: one scrape sees the whole pool.
        #expect(samples["skynet_worker_tasks_done{worker=worker-b}"] == Double(onB), "\(samples)")
        #expect(samples["skynet_worker_tasks_running{worker=worker-b}"] == 0)
        #expect((samples["skynet_worker_resident_memory_bytes{worker=worker-b}"] ?? 0) > 1_000_000)
        #expect((samples["skynet_worker_cpu_seconds{worker=worker-b}"] ?? 0) > 0)
        #expect((samples["skynet_worker_last_heard_seconds{worker=worker-b}"] ?? 99) < 5)
        #expect(samples["skynet_worker_info{host=\(WorkerFigures.hostName),worker=worker-b}"] == 1, "\(samples)")
        // Histograms by kind: each completed result's run time (the sectors take 100 ms), and a
        // queue wait for every dispatch; the queue is empty, so its oldest task is 0 s old.
        #expect(samples["skynet_task_run_seconds_count{kind=sector}"] == 40, "\(samples)")
        #expect(samples["skynet_task_run_seconds_bucket{kind=sector,le=0.05}"] == 0)
        #expect(samples["skynet_task_run_seconds_bucket{kind=sector,le=0.25}"] == 40)
        #expect((samples["skynet_task_run_seconds_sum{kind=sector}"] ?? 0) >= 3.9)
        #expect(samples["skynet_task_queue_wait_seconds_count{kind=sector}"] == Double(status.dispatched))
        #expect(samples["skynet_task_queue_wait_seconds_bucket{kind=sector,le=+Inf}"] == Double(status.dispatched))
        #expect(samples["skynet_queue_oldest_age_seconds{kind=sector}"] == 0)
        #expect(samples["skynet_queue_depth{kind=sector}"] == 0)
        // A durable broker: one group commit at least per accepted batch.
        #expect((samples["skynet_journal_commit_seconds_count{}"] ?? 0) >= 1, "\(samples)")
        await cluster.shutdown()
    }

    @Test(
        "HTTP: a token is required off loopback and checked; garbage and slow clients neither crash nor stall the broker"
    )
    func httpTokenAndGarbage() async throws {
        let (refused, message) = try await self.finish(
            ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*", "--http", "0.0.0.0:0"],
            name: "open-http"
        )
        #expect(refused != nil && refused != 0 && message.contains("--http-token"), "\(message)")
        let cluster = try await Cluster(workers: 1, brokerExtra: ["--http", "127.0.0.1:0", "--http-token", "s3cret"])
        let url = try #require(await Self.dashboardURL(cluster.broker))
        let probe = """
            import socket, sys, time, urllib.request, urllib.error
            url = sys.argv[1]
            def get(path, header=None):
                request = urllib.request.Request(url + path)
                if header: request.add_header("Authorization", header)
                try:
                    with urllib.request.urlopen(request, timeout=5) as r: return r.status
                except urllib.error.HTTPError as e: return e.code
            host, port = url.split("//")[1].strip("/").rsplit(":", 1)
            slow = []
            for i in range(40):  # slow clients: a request never finished
                s = socket.create_connection((host, int(port))); s.sendall(b"GET /api/status HTTP/1.1\\r\\nHost: x\\r\\n"); slow.append(s)
            for junk in [b"\\x00\\xff" * 500, b"GET " + b"A" * 100000 + b" HTTP/1.1\\r\\n\\r\\n", b"POST /metrics HTTP/1.1\\r\\nContent-Length: 99999999\\r\\n\\r\\nxx"]:
                s = socket.create_connection((host, int(port))); s.sendall(junk); s.close()
            print(get("api/status"), get("api/status", "Bearer wrong"), get("api/status", "Bearer s3cret"),
                  get("api/status?token=s3cret"), get("metrics", "Bearer s3cret"), get("", "Bearer s3cret"))
            """
        let script = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(getpid()).py")
        try probe.write(to: script, atomically: true, encoding: .utf8)
        let answers = try runCommand("/usr/bin/env", ["python3", script.path, url])
        #expect(answers.trimmingCharacters(in: .whitespacesAndNewlines) == "401 401 200 200 200 200", "\(answers)")
        // A port in use: a one-line error, for the broker and for the demo.
        let taken = String(url.dropFirst("http://".count).dropLast())
        let (clash, clashError) = try await self.finish(
            ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*", "--http", taken],
            name: "http-clash"
        )
        #expect(clash != nil && clash != 0 && clashError.contains("is --http \(taken) free?"), "\(clashError)")
        let (demo, demoError) = try await self.finish(
            ["demo", "--sectors", "2", "--work", "10ms", "--http", taken],
            name: "demo-clash"
        )
        #expect(demo != nil && demo != 0 && demoError.contains("cannot serve the dashboard"), "\(demoError)")
        // The broker still dispatches.
        let submit = try cluster.submit(["--sectors", "20", "--work", "10ms", "--fail-every", "0"])
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
        #expect(cluster.broker.isRunning)
        await cluster.shutdown()
    }

    @Test(
        "HTTP: the dashboard in a real browser shows the workers' slots, a killed worker as lost, and the job complete"
    )
    func dashboardInABrowser() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver"), Self.hasPython("selenium") else {
            if ProcessInfo.processInfo.environment["CI"] == "true" {
                Issue.record("chromium-driver or selenium is missing (.ci/run installs them)")
            }
            return
        }
        let cluster = try await Cluster(workers: 0, brokerExtra: ["--http", "127.0.0.1:0"])
        let url = try #require(await Self.dashboardURL(cluster.broker))
        let doomed = try await cluster.addWorker(name: "worker-a")
        try await cluster.addWorker(name: "worker-b")
        // Every 9th scan in a worker fails, and failures are final (--retry none): dead letters.
        let submit = try cluster.submit([
            "--sectors", "80", "--work", "500ms", "--fail-every", "9", "--retry", "none", "--name", "sky scan",
        ])
        let screenshot = SkynetBinary.packageRoot.appendingPathComponent(".build/dashboard.png").path
        let seen = try await Self.python("dashboard.py", [url, "\(doomed.pid)", screenshot, "80"])
        let failed = await submit.waitForExit(timeout: .seconds(60))
        struct Seen: Decodable {
            struct Job: Decodable {
                let name: String
                let state: String
                let progress: Int
                let tasks: Int
                let completed: Int
                let failed: Int
            }
            let workers: [String]
            let hosts: [String]
            let busy_slots: Int
            let live: String
            let running_progress: String
            let lost: [String]
            let done_cells: [String]
            let job: Job
            let dead_letters: [String]
            let kind: [String]
            let completed: Int
            let scheduled: Int
        }
        let view = try JSONDecoder().decode(Seen.self, from: Data(seen.utf8))
        #expect(view.workers == ["worker-a", "worker-b"] && view.busy_slots > 0 && view.live == "live", "\(seen)")
        #expect(view.hosts == [WorkerFigures.hostName], "each worker row shows its host: \(seen)")
        #expect(view.running_progress.hasSuffix("%"), "\(seen)")
        #expect(view.lost == ["worker-a"] && view.scheduled >= 80, "\(seen)")
        #expect(!view.done_cells.isEmpty, "the worker row shows its own figures: \(seen)")
        // The job as its coordinator reported it: 100%, its counts adding up, its dead letters.
        #expect(view.job.name == "sky scan" && view.job.progress == 100 && view.job.tasks == 80, "\(seen)")
        #expect(view.job.completed + view.job.failed == 80 && view.job.failed >= 1, "\(seen)")
        #expect(failed == Int32(view.job.failed), "submit exits with the tasks not completed: \(seen)")
        #expect(view.dead_letters.count == min(view.job.failed, 5), "\(seen)")
        #expect(view.dead_letters.allSatisfy { $0.contains("fails every 9") }, "\(seen)")
        #expect(view.kind.first == "sector" && view.kind[1] == "0", "the kind's row, its queue empty: \(seen)")
        #expect(FileManager.default.fileExists(atPath: screenshot))
        await cluster.shutdown()
    }

    @Test("--log-format json: every log line is one JSON object with time, level, label, message and the metadata")
    func jsonLogs() async throws {
        let broker = try Spawned(
            ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*", "--log-format", "json"],
            name: "json-logs"
        )
        #expect(await broker.listeningEndpoints(timeout: .seconds(10)) != nil)
        #expect(await broker.stop() == 0)
        let lines = broker.stderr.split(separator: "\n")
        #expect(lines.count >= 2, "\(broker.stderr)")
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["time"] is String && object?["level"] as? String == "info", "\(line)")
            #expect(object?["label"] as? String == "skynet.broker" && object?["message"] is String, "\(line)")
        }
        #expect(
            lines.contains {
                $0.contains("\"message\":\"broker listening\"") && $0.contains("\"frontend\":\"tcp://127.0.0.1:")
            }
        )
    }
}
