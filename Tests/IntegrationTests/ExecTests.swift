import Foundation
import SkyNet
import SkyNetCLI
import Testing

@testable import SkyNet
@testable import SkyNetCore

/// The `exec` kind with real processes: allowed and refused programs, no shell, replacement strings
/// and quoting, a clean environment, the output cap, process-group teardown on timeout and cancel,
/// a worker killed or drained mid-command, `--joblog`, and `--cache` with a killed submitter. An
/// extension of ``EndToEndTests``, so it is serialized with the other process tests.
extension EndToEndTests {
    /// One `--json` line of an exec task.
    struct ExecLine: Decodable {
        let seq: Int
        let command: String
        let status: String
        let system: String
        let exit_code: Int?
        let signal: Int?
        let stdout: String?
        let stderr: String?
        let truncated: Bool
        let stdout_bytes: Int?
        let from_cache: Bool
        let error: String?
    }

    static func execLines(_ output: String) throws -> [ExecLine] {
        try output.split(separator: "\n").filter { $0.hasPrefix("{\"id\"") }.map {
            try JSONDecoder().decode(ExecLine.self, from: Data($0.utf8))
        }
    }

    /// A fresh directory with `files` (name → contents).
    static func directory(_ files: [String: String] = [:]) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-exec-test-\(UUID())")
        try FileManager.default.createDirectory(
            at: directory,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o777]
        )
        for (name, contents) in files {
            try contents.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return directory
    }

    /// Writes `lines` to a file in `directory` and returns its path.
    static func inputs(_ lines: [String], in directory: URL, name: String = "inputs") throws -> String {
        let path = directory.appendingPathComponent(name).path
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Processes whose command line contains `needle`.
    static func processes(matching needle: String) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid in
            guard Int(pid) != nil, let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else {
                return nil
            }
            let line = String(decoding: data.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return line.contains(needle) ? "\(pid): \(line)" : nil
        }
    }

    /// Polls until no process matches `needle`.
    static func noneLeft(_ needle: String, within timeout: Duration = .seconds(5)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if Self.processes(matching: needle).isEmpty { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// A worker that runs `sha256sum` and `sh`; as root, as `nobody` (a root worker must say whom
    /// commands run as), which is why test directories are world-writable.
    static let commandWorker =
        ["--allow-command", "/usr/bin/sha256sum", "--allow-command", "/bin/sh", "--insecure"] + Self.runAs

    /// `--run-as nobody` when the tests run as root, else nothing (commands run as the tester).
    static let runAs = geteuid() == 0 ? ["--run-as", "nobody"] : []

    @Test("exec: allowed commands run where the files are; a program not on the list is refused and never runs")
    func execAllowedAndRefused() async throws {
        let files = (1...6).reduce(into: [String: String]()) {
            $0["file \($1).txt"] = String(repeating: "line \($1)\n", count: $1 * 100)
        }
        let directory = try Self.directory(files)
        let cluster = try await Cluster(workers: 0)
        try await cluster.addWorker(name: "worker-a", extra: Self.commandWorker)
        try await cluster.addWorker(name: "worker-b", extra: Self.commandWorker)
        let names = files.keys.sorted()
        let submit = try cluster.submit([
            "--exec", "sha256sum {}", "--inputs", try Self.inputs(names, in: directory), "--workdir", directory.path,
            "--json", "-k",
        ])
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
        let lines = try Self.execLines(submit.stdout)
        #expect(lines.map(\.seq) == Array(1...6), "-k prints in input order")
        for (line, name) in zip(lines, names) {
            let digest = CacheKey(bytes: SHA256.hash(Array(files[name]!.utf8))).description
            #expect(line.status == "completed" && line.exit_code == 0)
            #expect(line.stdout == "\(digest)  \(name)\n", "\(line)")
            #expect(line.command == "sha256sum '\(name)'")
        }

        // Not on the list: refused on the worker, the file untouched, the exit status counts it.
        let victim = directory.appendingPathComponent("file 1.txt").path
        let refused = try cluster.submit([
            "--exec", "rm -f {}", "--inputs", try Self.inputs([victim], in: directory, name: "victims"),
            "--max-attempts", "1", "--json",
        ])
        #expect(await refused.waitForExit(timeout: .seconds(30)) == 1, "\(refused.stderr)")
        let line = try #require(try Self.execLines(refused.stdout).first)
        #expect(line.status == "failed" && line.error?.contains("command not allowed on worker-") == true, "\(line)")
        #expect(FileManager.default.fileExists(atPath: victim))

        // No shell unless a shell is the program: `;` and `>` are arguments of sha256sum.
        let pwned = directory.appendingPathComponent("pwned").path
        let literal = try cluster.submit([
            "--exec", "sha256sum {} ; touch \(pwned) > \(pwned)", "--inputs",
            try Self.inputs(["file 2.txt"], in: directory, name: "one"), "--workdir", directory.path,
            "--max-attempts", "1", "--json",
        ])
        #expect(await literal.waitForExit(timeout: .seconds(30)) == 1, "\(literal.stderr)")
        let literalLine = try #require(try Self.execLines(literal.stdout).first)
        #expect(
            literalLine.exit_code == 1 && literalLine.stderr?.contains("touch: No such file") == true,
            "\(literalLine)"
        )
        #expect(!FileManager.default.fileExists(atPath: pwned))
        await cluster.shutdown()
    }

    @Test("exec: {} and {#} in quoted words, a clean environment with --env and the SKYNET_ variables, the output cap")
    func execWordsEnvironmentAndCap() async throws {
        let directory = try Self.directory()
        let cluster = try await Cluster(workers: 0)
        try await cluster.addWorker(name: "worker-a", extra: Self.commandWorker)
        let template = #"sh -c 'printf "[%s] [%s] [%s]\n" "$1" "$2" "$SKYNET_SEQ"' x {} "{#} and {}""#
        let words = try cluster.submit([
            "--exec", template, "--inputs", try Self.inputs(["a b", "it's"], in: directory), "-k", "--no-progress",
        ])
        #expect(await words.waitForExit(timeout: .seconds(30)) == 0, "\(words.stderr)")
        #expect(words.stdout == "[a b] [1 and a b] [1]\n[it's] [2 and it's] [2]\n", "\(words.stdout)")

        let environment = try Spawned(
            [
                "submit", "--broker", cluster.frontend, "--exec", "sh -c 'env | sort'", "--env", "KEEP",
                "--inputs", try Self.inputs(["x"], in: directory, name: "env"),
            ],
            name: "submit-env",
            launcher: ["/usr/bin/env", "KEEP=kept value", "DROP=dropped"]
        )
        #expect(await environment.waitForExit(timeout: .seconds(30)) == 0, "\(environment.stderr)")
        let names = environment.stdout.split(separator: "\n").map {
            $0.split(separator: "=").first.map(String.init) ?? ""
        }
        #expect(
            Set(names).isSubset(of: ["KEEP", "PATH", "PWD", "SHLVL", "SKYNET_ATTEMPT", "SKYNET_SEQ", "SKYNET_TASK_ID"]),
            "\(names)"
        )
        #expect(environment.stdout.contains("KEEP=kept value\n") && environment.stdout.contains("SKYNET_SEQ=1\n"))
        // Under the worker's TMPDIR (`make test` gives the run one of its own), else /tmp.
        let workRoot = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        #expect(
            environment.stdout.contains(
                "PWD=\(workRoot.hasSuffix("/") ? String(workRoot.dropLast()) : workRoot)/skynet-exec-"
            ),
            "a fresh directory: \(environment.stdout)"
        )

        let capped = try cluster.submit([
            "--exec", #"sh -c 'head -c 300000 /dev/zero | tr "\0" a; echo END'"#, "--inputs",
            try Self.inputs(["x"], in: directory, name: "cap"), "--max-output", "64K", "--json",
        ])
        #expect(await capped.waitForExit(timeout: .seconds(30)) == 0, "\(capped.stderr)")
        let line = try #require(try Self.execLines(capped.stdout).first)
        #expect(line.truncated && line.stdout_bytes == 300_004)
        #expect(line.stdout?.utf8.count == 64 << 10 && line.stdout?.hasSuffix("aaaEND\n") == true)
        await cluster.shutdown()
    }

    @Test("exec: a timeout and a cancel end the command's whole process group, grandchildren included")
    func execTeardown() async throws {
        let directory = try Self.directory()
        let cluster = try await Cluster(workers: 0)
        try await cluster.addWorker(name: "worker-a", extra: Self.commandWorker + ["--kill-grace", "500ms"])
        // A grandchild in the background, and one that ignores TERM (only KILL ends it).
        let template = #"sh -c 'sleep 3{}1 & (trap "" TERM; sleep 3{}2) & sleep 3{}3'"#
        let timed = try cluster.submit([
            "--exec", template, "--inputs", try Self.inputs(["7"], in: directory), "--timeout", "1s",
            "--max-attempts", "1", "--json",
        ])
        #expect(await timed.waitForExit(timeout: .seconds(20)) == 1, "\(timed.stderr)")
        #expect(try Self.execLines(timed.stdout).first?.error == "timed out")
        #expect(await Self.noneLeft("sleep 37"), "\(Self.processes(matching: "sleep 37"))")

        let cancelled = try cluster.submit([
            "--exec", template, "--inputs", try Self.inputs(["8"], in: directory, name: "cancel"), "--json",
        ])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 1 })
        #expect(await Self.noneLeft("sleep 38", within: .milliseconds(300)) == false, "the command runs")
        cancelled.signal(SIGINT)
        #expect(await cancelled.waitForExit(timeout: .seconds(15)) == 130, "\(cancelled.stderr)")
        #expect(await Self.noneLeft("sleep 38"), "\(Self.processes(matching: "sleep 38"))")
        await cluster.shutdown()
    }

    @Test(
        "exec: a worker killed mid-command loses nothing (the task runs elsewhere); a draining worker waits for its command"
    )
    func execWorkerLoss() async throws {
        let directory = try Self.directory()
        let cluster = try await Cluster(workers: 0)
        let first = try await cluster.addWorker(name: "worker-a", extra: Self.commandWorker)
        let submit = try cluster.submit([
            "--exec", "sh -c 'sleep 1; echo done {}'", "--inputs", try Self.inputs(["one"], in: directory), "--json",
        ])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 1 })
        first.signal(SIGKILL)
        try await cluster.addWorker(name: "worker-b", extra: Self.commandWorker)
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
        let line = try #require(try Self.execLines(submit.stdout).first)
        #expect(line.stdout == "done one\n" && line.system == "worker-b", "\(line)")

        let drained = try cluster.submit([
            "--exec", "sh -c 'sleep 1.5; echo drained {}'", "--inputs",
            try Self.inputs(["two"], in: directory, name: "d"),
            "--json",
        ])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 1 })
        let worker = cluster.workers.last!
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0, "\(worker.stderr)")
        #expect(await drained.waitForExit(timeout: .seconds(15)) == 0, "\(drained.stderr)")
        let drainedLine = try #require(try Self.execLines(drained.stdout).first)
        #expect(
            drainedLine.stdout == "drained two\n" && drainedLine.system == "worker-b"
                && drainedLine.status == "completed"
        )
        await cluster.shutdown()
    }

    @Test("exec: --joblog parses as GNU parallel's; --results writes stdout, stderr and exit per task")
    func execJoblogAndResults() async throws {
        let directory = try Self.directory()
        let cluster = try await Cluster(workers: 0)
        try await cluster.addWorker(name: "worker-a", extra: Self.commandWorker)
        let joblog = directory.appendingPathComponent("jobs.tsv").path
        let results = directory.appendingPathComponent("out").path
        let submit = try cluster.submit([
            "--exec", #"sh -c 'echo out {}; echo err {} >&2; exit {}'"#, "--inputs",
            try Self.inputs(["0", "3", "0"], in: directory), "--joblog", joblog, "--results", results,
            "--max-attempts", "1", "--no-progress",
        ])
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 1, "one task failed: \(submit.stderr)")
        let rows = try String(contentsOfFile: joblog, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        }
        #expect(
            rows.first == ["Seq", "Host", "Starttime", "JobRuntime", "Send", "Receive", "Exitval", "Signal", "Command"]
        )
        #expect(rows.count == 4 && rows.allSatisfy { $0.count == 9 })
        for row in rows.dropFirst() {
            #expect(Int(row[0]) != nil && row[1] == "worker-a" && Double(row[2]) != nil)
            #expect(Double(row[3].trimmingCharacters(in: .whitespaces)) != nil && Int(row[5]) == 12)
        }
        #expect(Set(rows.dropFirst().map { "\($0[0]):\($0[6])" }) == ["1:0", "2:3", "3:0"])
        func file(_ seq: Int, _ name: String) -> String? {
            try? String(contentsOfFile: "\(results)/\(seq)/\(name)", encoding: .utf8)
        }
        #expect(file(2, "stdout") == "out 3\n" && file(2, "stderr") == "err 3\n" && file(2, "exit") == "3\n")
        #expect(file(1, "exit") == "0\n" && file(3, "stdout") == "out 0\n")
        #expect(
            submit.stdout.contains("out 0\n") && submit.stderr.contains("skynet: failed: task 2"),
            "\(submit.stderr)"
        )
        await cluster.shutdown()
    }

    @Test("--cache: a re-run runs only what has no stored result; failures are not stored; kill -9 and resume")
    func execCacheResume() async throws {
        let directory = try Self.directory()
        let cache = directory.appendingPathComponent("cache").path
        let cluster = try await Cluster(workers: 0)
        try await cluster.addWorker(name: "worker-a", extra: Self.commandWorker)
        let marks = directory.appendingPathComponent("marks").path
        try FileManager.default.createDirectory(
            atPath: marks,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o777]
        )
        // Each run of a task leaves a mark; task 13 fails (exit 13), twice.
        let template = "sh -c 'sleep 0.2; touch \(marks)/{}.$$; echo done {}; [ {} != 13 ]'"
        let inputs = try Self.inputs((1...24).map(String.init) + ["5", "7"], in: directory)
        func runs(_ item: Int) -> Int {
            ((try? FileManager.default.contentsOfDirectory(atPath: marks)) ?? []).filter { $0.hasPrefix("\(item).") }
                .count
        }
        let first = try cluster.submit([
            "--exec", template, "--inputs", inputs, "--cache", cache, "--max-attempts", "1", "--json",
        ])
        // Kill -9 once some results are in.
        #expect(
            await first.waitForStdout(timeout: .seconds(30)) { $0.components(separatedBy: "\"completed\"").count > 6 }
        )
        first.signal(SIGKILL)
        _ = await first.waitForExit(timeout: .seconds(5))
        let before = try Self.execLines(first.stdout).filter { $0.status == "completed" }.count
        let second = try cluster.submit([
            "--exec", template, "--inputs", inputs, "--cache", cache, "--max-attempts", "1", "--json",
        ])
        #expect(await second.waitForExit(timeout: .seconds(60)) == 1, "task 13 fails: \(second.stderr)")
        let lines = try Self.execLines(second.stdout)
        #expect(lines.count == 26, "the output is complete")
        #expect(
            Set(lines.filter { $0.status == "completed" }.compactMap(\.stdout))
                == Set((1...24).filter { $0 != 13 }.map { "done \($0)\n" })
        )
        let summary = try parseJSONOutput(second.stdout).summary
        #expect(summary.from_cache >= before && summary.from_cache <= 24, "\(summary)")
        // A third run, once nothing of the killed job is left at the broker: only the failed task runs.
        #expect(try await cluster.waitForStatus(timeout: .seconds(20)) { $0.queued == 0 && $0.leased == 0 })
        let marksBefore = ((try? FileManager.default.contentsOfDirectory(atPath: marks)) ?? []).count
        let failedBefore = runs(13)
        let third = try cluster.submit([
            "--exec", template, "--inputs", inputs, "--cache", cache, "--max-attempts", "1", "--json",
        ])
        #expect(await third.waitForExit(timeout: .seconds(30)) == 1)
        let thirdSummary = try parseJSONOutput(third.stdout).summary
        #expect(
            thirdSummary.from_cache == 25 && thirdSummary.failed == 1 && thirdSummary.tasks == 26,
            "\(thirdSummary)"
        )
        #expect(runs(13) == failedBefore + 1, "a failure is never stored: it runs again")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: marks)) ?? []).count == marksBefore + 1)
        // Within one run, identical tasks run once: a fresh cache, 5 and 7 twice in the input.
        let fresh = try cluster.submit([
            "--exec", template, "--inputs", inputs, "--cache", directory.appendingPathComponent("fresh").path,
            "--max-attempts", "1", "--json",
        ])
        let fiveBefore = runs(5)
        #expect(await fresh.waitForExit(timeout: .seconds(30)) == 1)
        #expect(try parseJSONOutput(fresh.stdout).summary.identical == 2)
        #expect(runs(5) == fiveBefore + 1)
        await cluster.shutdown()
    }

    @Test("exec: a worker refuses --allow-command without CURVE (unless --insecure) and a relative path")
    func execWorkerRefusals() async throws {
        let cluster = try await Cluster(workers: 0)
        let (plain, plainErr) = try await self.finish(
            ["worker", "--broker", cluster.backend, "--allow-command", "/bin/sh"],
            name: "plain"
        )
        #expect(plain != nil && plain != 0 && plainErr.contains("use CURVE"), "\(plainErr)")
        let (relative, relativeErr) = try await self.finish(
            ["worker", "--broker", cluster.backend, "--allow-command", "sh", "--insecure"],
            name: "relative"
        )
        #expect(relative != nil && relative != 0 && relativeErr.contains("absolute path"), "\(relativeErr)")
        await cluster.shutdown()
    }
}
