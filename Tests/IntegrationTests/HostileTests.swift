import Foundation
import SkyNet
import SkyNetCLI
import Testing

/// The hostile suite: what an hour of attacking the README's setup found (docs in
/// `shared/research/hostile-hour-2026-11-24.md`), each case with real processes. When you find the
/// next hole, add its case here, named for what must now hold. Part of ``EndToEndTests`` (serialized
/// with the other process tests).
extension EndToEndTests {
    @Suite("Hostile: holes a hostile hour found stay closed")
    struct Hostile {
        /// Runs `skynet ARGUMENTS` to its end: its exit status (nil if it hung), stdout and stderr.
        func run(
            _ arguments: [String],
            name: String,
            within timeout: Duration = .seconds(20),
            launcher: [String] = []
        ) async throws -> (status: Int32?, stdout: String, stderr: String) {
            let process = try Spawned(arguments, name: name, launcher: launcher)
            let status = await process.waitForExit(timeout: timeout)
            if status == nil { await process.stop() }
            return (status, process.stdout, process.stderr)
        }

        static let isRoot = geteuid() == 0

        // MARK: Commands that cannot escape their allowlist

        @Test("exec: LD_PRELOAD and the other hooks are refused (task file and --env); the injected code never runs")
        func environmentHooksRefused() async throws {
            let directory = try EndToEndTests.directory()
            // A library whose constructor leaves a mark: if it ever loads, the hole is open.
            let source = directory.appendingPathComponent("evil.c").path
            let library = directory.appendingPathComponent("evil.so").path
            let mark = directory.appendingPathComponent("PWNED").path
            try #"""
            #include <stdio.h>
            __attribute__((constructor)) static void pwn(void) { FILE *f = fopen("\#(mark)", "a"); if (f) fclose(f); }
            """#.write(toFile: source, atomically: true, encoding: .utf8)
            try runCommand("/usr/bin/cc", ["-shared", "-fPIC", "-o", library, source])
            let cluster = try await Cluster(workers: 0)
            try await cluster.addWorker(
                name: "worker-a",
                extra: EndToEndTests.commandWorker + ["--allow-command", "/bin/echo", "--allow-env", "LEVEL_HOOK"]
            )
            let tasks = directory.appendingPathComponent("tasks.jsonl").path
            try """
            {"exec": ["echo", "a"], "env": {"LD_PRELOAD": "\(library)"}}
            {"exec": ["sh", "-c", "true"], "env": {"BASH_ENV": "\(library)"}}
            {"exec": ["echo", "c"], "env": {"GCONV_PATH": "/tmp"}}
            {"exec": ["echo", "d"], "env": {"PATH": "/tmp"}}
            {"exec": ["sh", "-c", "echo [$LEVEL_HOOK]"], "env": {"LEVEL_HOOK": "allowed by the worker"}}

            """.write(toFile: tasks, atomically: true, encoding: .utf8)
            let submit = try cluster.submit(["--tasks", tasks, "--max-attempts", "1", "--json"])
            #expect(await submit.waitForExit(timeout: .seconds(30)) == 4, "\(submit.stderr)")
            let lines = try EndToEndTests.execLines(submit.stdout)
            #expect(lines.count == 5)
            for name in ["LD_PRELOAD", "BASH_ENV", "GCONV_PATH"] {
                #expect(
                    lines.contains { $0.error?.contains("\(name) can make an allowed program run other code") == true }
                )
            }
            #expect(lines.contains { $0.error?.contains("PATH is set by the worker") == true })
            #expect(lines.contains { $0.stdout == "[allowed by the worker]\n" }, "--allow-env lets a named one through")
            #expect(!FileManager.default.fileExists(atPath: mark), "the preloaded library ran")
            // The same through --env, from the submitter's environment (a library that does not
            // exist, so that the submitter itself loads nothing).
            let viaFlag = try Spawned(
                [
                    "submit", "--broker", cluster.frontend, "--exec", "echo {}", "--env", "LD_PRELOAD", "--inputs",
                    try EndToEndTests.inputs(["x"], in: directory), "--max-attempts", "1",
                ],
                name: "submit-env",
                launcher: ["/usr/bin/env", "LD_PRELOAD=/nonexistent/evil.so"]
            )
            #expect(await viaFlag.waitForExit(timeout: .seconds(30)) == 1, "\(viaFlag.stderr)")
            #expect(viaFlag.stderr.contains("LD_PRELOAD can make an allowed program run other code"))

            await cluster.shutdown()
        }

        @Test(
            "exec: a root worker needs --run-as; commands then run as that user and cannot read the worker's key",
            .enabled(if: Hostile.isRoot, "needs root to switch users")
        )
        func runAsUnprivileged() async throws {
            let cluster = try await Cluster(workers: 0, curve: true)
            let keys = try #require(cluster.keys)
            let secret = keys.secretFile("worker").path
            let (refused, _, refusedErr) = try await self.run(
                ["worker", "--broker", cluster.backend, "--allow-command", "/bin/sh"] + keys.arguments(for: "worker"),
                name: "no-run-as"
            )
            #expect(refused == 255 && refusedErr.contains("--run-as USER"), "\(refusedErr)")
            #expect(refusedErr.split(separator: "\n").count == 1, "one line: \(refusedErr)")
            try await cluster.addWorker(name: "worker-a", extra: ["--allow-command", "/bin/sh", "--run-as", "nobody"])
            let directory = try EndToEndTests.directory()
            // The README's own theft: read the worker's secret with an allowed program.
            let submit = try cluster.submit([
                "--exec", "sh -c 'id -un; cat {}'", "--inputs", try EndToEndTests.inputs([secret], in: directory),
                "--max-attempts", "1", "--json",
            ])
            #expect(await submit.waitForExit(timeout: .seconds(30)) == 1, "\(submit.stderr)")
            let line = try #require(try EndToEndTests.execLines(submit.stdout).first)
            #expect(line.stdout == "nobody\n", "\(line)")
            #expect(line.stderr?.contains("Permission denied") == true, "\(line)")
            #expect(line.stdout?.contains("secret-key") != true)
            await cluster.shutdown()
        }

        @Test("skynet bench killed with SIGKILL: its broker and worker stop within seconds (they ran on for good)")
        func benchChildrenStopWithIt() async throws {
            let (bench, children) = try await Self.benchWithChildren()
            bench.signal(SIGKILL)
            _ = await bench.waitForExit(timeout: .seconds(5))
            let gone = await Self.allGone(children, within: .seconds(10))
            for pid in children { kill(pid, SIGKILL) }
            #expect(gone, "still running: \(children.filter(Self.isRunning))")
        }

        @Test(
            "skynet bench whose worker is killed mid-run: one line naming it, exit 255, within seconds (it waited for good)"
        )
        func benchWorkerKilled() async throws {
            let (bench, children) = try await Self.benchWithChildren()
            let worker = children.first { pid in
                let arguments = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()
                return arguments.split(separator: 0).dropFirst().first.map { String(decoding: $0, as: UTF8.self) }
                    == "worker"
            }
            guard let worker else {
                bench.signal(SIGKILL)
                Issue.record("no worker among the bench's children \(children)")
                return
            }
            try await Task.sleep(for: .milliseconds(300))
            kill(worker, SIGKILL)
            let status = await bench.waitForExit(timeout: .seconds(10))
            if status == nil { bench.signal(SIGKILL) }
            #expect(status == 255, "exit status \(String(describing: status)); \(bench.stderr)")
            #expect(bench.stderr.contains("worker-1 (pid \(worker)) exited during the run"), "\(bench.stderr)")
            #expect(bench.stderr.split(separator: "\n").count == 1, "one line: \(bench.stderr)")
            let gone = await Self.allGone(children, within: .seconds(10))
            for pid in children { kill(pid, SIGKILL) }
            #expect(gone, "still running: \(children.filter(Self.isRunning))")
        }

        /// A long `skynet bench latency` once its broker and worker run, with their pids.
        static func benchWithChildren() async throws -> (Spawned, [Int32]) {
            let bench = try Spawned(["bench", "latency", "--tasks", "10000000"], name: "bench")
            var children: [Int32] = []
            let deadline = ContinuousClock.now + .seconds(20)
            while children.count < 2, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                children = Self.children(of: bench.pid)
            }
            #expect(children.count == 2, "the bench's broker and worker: \(children); \(bench.stderr)")
            return (bench, children)
        }

        /// The processes whose parent is `parent` (from `/proc/PID/stat`).
        static func children(of parent: Int32) -> [Int32] {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            return entries.compactMap { entry in
                guard let pid = Int32(entry),
                    let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                    let end = stat.lastIndex(of: ")")
                else { return nil }
                // After the command's name in parentheses: the state, then the parent's pid.
                let fields = stat[stat.index(after: end)...].split(separator: " ")
                return fields.count > 1 && Int32(fields[1]) == parent ? pid : nil
            }
        }

        /// Whether `pid` runs (a zombie, waiting for a parent that does not reap it, does not).
        static func isRunning(_ pid: Int32) -> Bool {
            !(FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()).isEmpty
        }

        /// Polls until none of `pids` runs.
        static func allGone(_ pids: [Int32], within timeout: Duration) async -> Bool {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if !pids.contains(where: Self.isRunning) { return true }
                try? await Task.sleep(for: .milliseconds(100))
            }
            return false
        }

        @Test("exec: kill -9 of a worker ends its commands' whole process group; the task runs once elsewhere")
        func commandsDieWithTheirWorker() async throws {
            let directory = try EndToEndTests.directory()
            let cluster = try await Cluster(workers: 0)
            let first = try await cluster.addWorker(
                name: "worker-a",
                extra: EndToEndTests.commandWorker + ["--kill-grace", "300ms"]
            )
            // A grandchild in the background, and one that ignores TERM.
            let template = #"sh -c 'sleep 4{}1 & (trap "" TERM; sleep 4{}2) & sleep 4{}3; echo done {}'"#
            let submit = try cluster.submit([
                "--exec", template, "--inputs", try EndToEndTests.inputs(["7", "8"], in: directory), "--json",
            ])
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 2 })
            #expect(await EndToEndTests.noneLeft("sleep 471", within: .milliseconds(300)) == false, "it runs")
            first.signal(SIGKILL)
            for needle in ["sleep 471", "sleep 472", "sleep 473", "sleep 481", "sleep 482", "sleep 483"] {
                #expect(await EndToEndTests.noneLeft(needle), "\(EndToEndTests.processes(matching: needle))")
            }
            // Not waiting out the 47 s: a second worker takes the requeued tasks, then the job is cancelled.
            try await cluster.addWorker(name: "worker-b", extra: EndToEndTests.commandWorker)
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 2 })
            submit.signal(SIGINT)
            #expect(await submit.waitForExit(timeout: .seconds(15)) == 130)
            #expect(await EndToEndTests.noneLeft("sleep 47"), "\(EndToEndTests.processes(matching: "sleep 47"))")
            await cluster.shutdown()
        }

        @Test("CURVE: two live workers on one key are flagged in status (and logged), not served in silence")
        func sharedWorkerKeyFlagged() async throws {
            let cluster = try await Cluster(workers: 1, curve: true)
            try await cluster.addWorker(name: "rogue")
            let status = try await cluster.status()
            #expect(status.workers.count == 2 && status.workers.allSatisfy(\.sharedKey), "\(status.workers)")
            let (code, text, _) = try await self.run(
                ["status", "--broker", cluster.frontend] + cluster.keys!.arguments(for: "coordinator"),
                name: "status"
            )
            #expect(code == 0 && text.contains("SHARED KEY"), "\(text)")
            #expect(cluster.broker.stderr.contains("a second worker connected with the key of a live worker"))
            await cluster.shutdown()
        }

        // MARK: Tokens and allowlists that fail closed

        @Test("HTTP: an empty --http-token off loopback is refused like a missing one")
        func emptyTokenRefused() async throws {
            for token in [["--http-token", ""], []] {
                let (code, _, stderr) = try await self.run(
                    [
                        "broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*", "--http",
                        "0.0.0.0:0",
                    ]
                        + token,
                    name: "empty-token"
                )
                #expect(code != nil && code != 0 && stderr.contains("non-empty --http-token"), "\(stderr)")
            }
        }

        @Test("CURVE: a stray file in an allowlist never keeps a removed or renamed key in force")
        func allowlistRevocationFailsClosed() async throws {
            let cluster = try await Cluster(workers: 1, curve: true)
            let keys = try #require(cluster.keys)
            try await keys.add("bob", allow: "coordinators")
            /// Submits as bob until `accepted` says so (the broker reads changed allowlists within a
            /// heartbeat); the last error output.
            func submitAsBob(until accepted: Bool) async throws -> String {
                let deadline = ContinuousClock.now + .seconds(10)
                var last = ""
                while ContinuousClock.now < deadline {
                    let (code, _, stderr) = try await self.run(
                        ["submit", "--broker", cluster.frontend, "--sectors", "1", "--work", "1ms"]
                            + keys.arguments(for: "bob"),
                        name: "bob"
                    )
                    last = stderr
                    if (code == 0) == accepted { return stderr }
                    try await Task.sleep(for: .milliseconds(300))
                }
                return "still \(accepted ? "refused" : "accepted"): \(last)"
            }
            #expect(!(try await submitAsBob(until: true)).contains("still"), "bob is allowed first")
            // Revoked by renaming, next to a stray note: bob is refused all the same.
            let coordinators = keys.allowlist("coordinators")
            try Data("bob is our CI account\n".utf8).write(to: coordinators.appendingPathComponent("notes.txt"))
            try FileManager.default.moveItem(
                at: coordinators.appendingPathComponent("bob.key"),
                to: coordinators.appendingPathComponent("bob.key.revoked")
            )
            let refusal = try await submitAsBob(until: false)
            #expect(refusal.contains("refused this key"), "\(refusal)")
            #expect(
                await cluster.broker.waitForStdout(timeout: .seconds(5)) { _ in
                    cluster.broker.stderr.contains("notes.txt: not a certificate name")
                },
                "\(cluster.broker.stderr)"
            )
            // The allowed coordinator still gets in.
            let submit = try cluster.submit(["--sectors", "2", "--work", "1ms"])
            #expect(await submit.waitForExit(timeout: .seconds(20)) == 0, "\(submit.stderr)")
            await cluster.shutdown()
        }

        // MARK: The HTTP endpoint cannot starve the broker

        @Test("HTTP: 300 half-open connections neither lock out coordinators nor hold the broker's descriptors")
        func halfOpenConnectionsCapped() async throws {
            let cluster = try await Cluster(workers: 1, brokerExtra: ["--http", "127.0.0.1:0"])
            #expect(await cluster.broker.waitForStdout(timeout: .seconds(10)) { $0.contains("{\"http\":") })
            let line = cluster.broker.stdout.split(separator: "\n").first { $0.hasPrefix("{\"http\":") } ?? ""
            let port = try #require(line.split(separator: ":").last.flatMap { UInt16($0.prefix { $0.isNumber }) })
            var sockets: [Int32] = []
            defer { for socket in sockets { close(socket) } }
            for _ in 0..<300 {
                guard let fd = Garbage.connectTCP(port: port) else { continue }
                let partial = Array("GET /metrics HTTP/1.1\r\nHost: x\r\n".utf8)
                _ = partial.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                sockets.append(fd)
            }
            try await Task.sleep(for: .milliseconds(500))
            let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(cluster.broker.pid)/fd")
            #expect(descriptors.count < 200, "the broker holds at most 128 HTTP connections: \(descriptors.count)")
            let submit = try cluster.submit(["--sectors", "4", "--work", "1ms"])
            #expect(await submit.waitForExit(timeout: .seconds(20)) == 0, "\(submit.stderr)")
            // A request that never finishes is closed after the idle timeout (10 s).
            try await Task.sleep(for: .seconds(11))
            var buffer = [UInt8](repeating: 0, count: 64)
            let first = sockets[0]
            _ = fcntl(first, F_SETFL, O_NONBLOCK)
            let read = recv(first, &buffer, buffer.count, 0)
            #expect(read == 0, "closed by the broker (read \(read), errno \(errno))")
            await cluster.shutdown()
        }

        @Test("a broker out of descriptors says so (once, not per attempt) instead of failing accepts in silence")
        func outOfDescriptorsLogged() async throws {
            let broker = try Spawned(
                ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"],
                name: "small-broker",
                launcher: ["/usr/bin/prlimit", "--nofile=48:48"]
            )
            let (frontend, _) = try #require(await broker.listeningEndpoints(timeout: .seconds(10)))
            let port = try #require(UInt16(frontend.split(separator: ":").last ?? ""))
            var sockets: [Int32] = []
            defer { for socket in sockets { close(socket) } }
            for _ in 0..<80 {
                if let fd = Garbage.connectTCP(port: port) { sockets.append(fd) }
            }
            #expect(
                await broker.waitForStdout(timeout: .seconds(10)) { _ in
                    broker.stderr.contains("cannot accept connections: out of file descriptors")
                },
                "\(broker.stderr)"
            )
            try await Task.sleep(for: .seconds(1))
            #expect(broker.stderr.components(separatedBy: "out of file descriptors").count == 2, "said once")
            #expect(broker.stderr.contains("may open only 48 files"))
            await broker.stop()
        }

        // MARK: No silent hang, no silent loss

        @Test("a durable broker with a short heartbeat keeps a job longer than 3 heartbeats (it expired it in silence)")
        func durableShortHeartbeatKeepsJobs() async throws {
            let directory = try EndToEndTests.directory()
            let journal = directory.appendingPathComponent("broker.journal").path
            let cluster = try await Cluster(
                workers: 1,
                brokerExtra: ["--journal", journal, "--heartbeat", "200ms"]
            )
            // 20 × 300 ms on 4 slots: about 1.5 s, over 3 broker heartbeats (0.6 s); a coordinator
            // heartbeats every second, and is lost only after 10 s of silence.
            let submit = try cluster.submit(["--sectors", "20", "--work", "300ms", "--fail-every", "0"])
            #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
            #expect(submit.stdout.contains("Summary: 20 tasks, 20 completed"), "\(submit.stdout)")
            await cluster.shutdown()
        }

        @Test("skynet submit paused (Ctrl-Z) past the connection's heartbeats, then resumed: it finishes its job")
        func pausedSubmitFinishes() async throws {
            let cluster = try await Cluster(workers: 1)
            // 400 × 50 ms on 4 slots: about 5 s of work. Paused for 6 s, its connection dies of
            // libzmq's heartbeats (3 s) while the worker still runs its tasks; the broker's next
            // RESULT to it fails and the broker drops it with its tasks. It waited forever for their
            // results; it is now told to send them again.
            let submit = try cluster.submit(["--sectors", "400", "--work", "50ms", "--fail-every", "0"])
            try await Task.sleep(for: .milliseconds(600))
            submit.signal(SIGSTOP)
            try await Task.sleep(for: .seconds(6))
            submit.signal(SIGCONT)
            #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
            #expect(submit.stdout.contains("Summary: 400 tasks, 400 completed"), "\(submit.stdout)")
            #expect(cluster.broker.stderr.contains("coordinator unreachable"), "\(cluster.broker.stderr)")
            #expect(submit.stderr.contains("resending unfinished tasks"), "\(submit.stderr)")
            await cluster.shutdown()
        }

        @Test(
            "a broker with a 5 s heartbeat: its idle worker keeps its connection (peers wait out the broker's own interval)"
        )
        func slowBrokerHeartbeatKeepsPeers() async throws {
            let cluster = try await Cluster(workers: 1, brokerExtra: ["--heartbeat", "5s"])
            // The worker's own expiry is 3 s: before peers learned the broker's interval, an idle worker
            // called a 5 s broker lost and reconnected every few seconds.
            try await Task.sleep(for: .seconds(12))
            let submit = try cluster.submit(["--sectors", "8", "--work", "1s", "--fail-every", "0"])
            #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
            #expect(submit.stdout.contains("Summary: 8 tasks, 8 completed"), "\(submit.stdout)")
            let worker = cluster.workers[0].stderr
            #expect(
                !worker.contains("no heartbeat for") && !worker.contains("registered with the broker again"),
                "\(worker)"
            )
            #expect(!cluster.broker.stderr.contains("worker re-registered"), "\(cluster.broker.stderr)")
            #expect(try await cluster.status().workersRegistered == 1)
            await cluster.shutdown()
        }

        @Test("SIGTERM the instant the listening line appears: a graceful stop, exit 0, every time")
        func signalAtReadiness() async throws {
            for round in 0..<3 {
                let broker = try Spawned(
                    ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"],
                    name: "ready-\(round)"
                )
                #expect(await broker.listeningEndpoints(timeout: .seconds(10)) != nil)
                broker.signal(SIGTERM)
                #expect(await broker.waitForExit(timeout: .seconds(10)) == 0, "\(broker.stderr)")
                #expect(broker.stderr.contains("broker stopped"), "\(broker.stderr)")
            }
        }

        @Test(
            "a journal write that fails while the broker stops gracefully still exits 74",
            .enabled(if: Hostile.isRoot, "needs root to mount a small tmpfs")
        )
        func journalFailsWhileStopping() async throws {
            let tiny = try EndToEndTests.directory()
            try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", tiny.path])
            defer { _ = try? runCommand("/bin/umount", [tiny.path]) }
            let cluster = try await Cluster(
                workers: 0,
                brokerExtra: ["--journal", tiny.appendingPathComponent("j").path, "--shutdown-grace", "20s"]
            )
            try await cluster.addWorker(name: "worker-a", extra: EndToEndTests.commandWorker)
            // Each result is about 30 KB: its record needs pages the full disk no longer has.
            let submit = try cluster.submit([
                "--exec", "sh -c 'sleep 3; seq 1 6000; echo {}'",
                "--inputs", try EndToEndTests.inputs(["1", "2", "3", "4"], in: tiny),
            ])
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 4 })
            // The disk fills while the four run; their RESULT records are what the stop waits for.
            _ = try? runCommand("/bin/dd", ["if=/dev/zero", "of=\(tiny.path)/filler", "bs=4k"])
            cluster.broker.signal(SIGTERM)
            let exit = await cluster.broker.waitForExit(timeout: .seconds(30))
            submit.signal(SIGKILL)
            await cluster.shutdown()
            #expect(exit == 74, "\(cluster.broker.stderr.suffix(1500))")
            #expect(cluster.broker.stderr.contains("No space left on device"), "\(cluster.broker.stderr.suffix(1500))")
        }

        @Test("a task over 16 MiB is refused up front, naming it; nothing is queued and nothing hangs")
        func oversizedTaskRefused() async throws {
            let directory = try EndToEndTests.directory()
            let cluster = try await Cluster(workers: 0)
            try await cluster.addWorker(name: "worker-a", extra: EndToEndTests.commandWorker)
            let big = String(repeating: "z", count: 17_000_000)
            let inputs = try EndToEndTests.inputs(["a", "b", big, "c"], in: directory)
            let started = ContinuousClock.now
            let (code, _, stderr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--exec", "sh -c 'echo {}' x", "--inputs", inputs],
                name: "big"
            )
            #expect(code == 255 && stderr.contains("task 3") && stderr.contains("over the limit"), "\(stderr)")
            #expect(stderr.utf8.count < 2000, "the 17 MB input is not echoed")
            // ~1.5 s on CI; 8-10 s when `--exec`'s replacement strings rescanned the line at every
            // character of the template.
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(try await cluster.status().submitted == 0)
            await cluster.shutdown()
        }

        @Test("--detach: 40,000 tasks are linear; Ctrl-C mid-submission prints the job id and what was accepted")
        func detachedSubmission() async throws {
            let directory = try EndToEndTests.directory()
            let journal = directory.appendingPathComponent("broker.journal").path
            let cluster = try await Cluster(workers: 0, brokerExtra: ["--journal", journal])
            let started = ContinuousClock.now
            let (code, stdout, stderr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--sectors", "40000", "--work", "1ms", "--detach"],
                name: "detach-40k",
                within: .seconds(60)
            )
            let elapsed = ContinuousClock.now - started
            #expect(code == 0, "\(stderr)")
            #expect(elapsed < .seconds(30), "took \(elapsed) (quadratic took ~65 s)")
            let job = stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            _ = try await self.run(["cancel", job, "--broker", cluster.frontend], name: "cancel")

            let interrupted = try Spawned(
                ["submit", "--broker", cluster.frontend, "--sectors", "300000", "--work", "1ms", "--detach"],
                name: "detach-int"
            )
            // The broker is busy journaling: no STATUS to wait on, a moment instead.
            try await Task.sleep(for: .seconds(2))
            interrupted.signal(SIGINT)
            #expect(await interrupted.waitForExit(timeout: .seconds(10)) == 130, "\(interrupted.stderr)")
            let partial = interrupted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(TaskID(partial) != nil, "the job id on standard output: \(interrupted.stdout)")
            #expect(interrupted.stderr.contains("job \(partial) partly submitted"), "\(interrupted.stderr)")
            #expect(interrupted.stderr.contains("of 300000 tasks accepted"))
            let accepted = interrupted.stderr.split(separator: " ").firstIndex(of: "of").flatMap { index in
                Int(interrupted.stderr.split(separator: " ")[index - 1])
            }
            if let accepted, accepted > 0 {
                let (cancelled, _, cancelErr) = try await self.run(
                    ["cancel", partial, "--broker", cluster.frontend],
                    name: "cancel-partial",
                    within: .seconds(60)
                )
                #expect(cancelled == 0, "the printed id is the job's: \(cancelErr)")
            }
            await cluster.shutdown()
        }

        @Test(
            "--joblog and --results on a full disk: an error with the reason, the summary, and an exit that counts",
            .enabled(if: Hostile.isRoot, "needs root to mount a small tmpfs")
        )
        func outputsOnAFullDisk() async throws {
            let directory = try EndToEndTests.directory()
            let tiny = directory.appendingPathComponent("tiny")
            try FileManager.default.createDirectory(at: tiny, withIntermediateDirectories: true)
            try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", tiny.path])
            defer { _ = try? runCommand("/bin/umount", [tiny.path]) }
            let cluster = try await Cluster(workers: 0)
            try await cluster.addWorker(name: "worker-a", extra: EndToEndTests.commandWorker)
            let inputs = try EndToEndTests.inputs((1...50).map(String.init), in: directory)
            // The job log holds a page, then the disk is filled up: the log's header and first rows fit
            // in that page once the log is truncated, the rest do not.
            let joblog = tiny.appendingPathComponent("jobs.tsv").path
            _ = FileManager.default.createFile(atPath: joblog, contents: Data(repeating: 1, count: 4096))
            let many = try EndToEndTests.inputs((1...200).map(String.init), in: directory, name: "many")
            let fill = open(tiny.appendingPathComponent("fill").path, O_WRONLY | O_CREAT, 0o644)
            let chunk = [UInt8](repeating: 1, count: 1024)
            while chunk.withUnsafeBytes({ write(fill, $0.baseAddress, $0.count) }) > 0 {}
            close(fill)
            let (code, _, stderr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--exec", "sh -c 'echo {}'", "--inputs", many,
                    "--joblog", joblog,
                ],
                name: "joblog-full"
            )
            #expect(code != 0 && code != nil, "\(stderr)")
            #expect(stderr.contains("No space left on device"), "\(stderr)")
            #expect(stderr.contains("Summary: 200 tasks, 200 completed"), "\(stderr)")
            #expect(stderr.contains("not recorded"), "\(stderr)")
            let (resultsCode, _, resultsErr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--exec",
                    #"sh -c 'head -c 20000 /dev/zero | tr "\0" a; echo {}'"#, "--inputs", inputs, "--results",
                    tiny.appendingPathComponent("res").path,
                ],
                name: "results-full"
            )
            #expect(resultsErr.contains("No space left on device") && resultsErr.contains("Summary: 50 tasks"))
            #expect((resultsCode ?? 0) > 1, "the completed results it lost count: \(String(describing: resultsCode))")
            let (cacheCode, _, cacheErr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--exec", "sh -c 'echo {}'", "--inputs", inputs, "--cache",
                    tiny.appendingPathComponent("cache").path,
                ],
                name: "cache-full"
            )
            #expect(cacheCode != 0 && cacheCode != nil, "\(cacheErr)")
            #expect(
                cacheErr.contains("--cache: results not recorded") && cacheErr.contains("No space left on device"),
                "\(cacheErr)"
            )
            await cluster.shutdown()
        }

        @Test(
            "standard output that cannot be written (/dev/full): the reason on standard error, the summary, an exit that counts"
        )
        func standardOutputFull() async throws {
            let cluster = try await Cluster(workers: 1)
            // The shell opens /dev/full as skynet's standard output, then execs it.
            let full = ["/bin/sh", "-c", #"exec "$@" >/dev/full"#, "sh"]
            for format in [[], ["--json"]] {
                let (code, _, stderr) = try await self.run(
                    ["submit", "--broker", cluster.frontend, "--sectors", "20", "--work", "1ms"] + format,
                    name: "stdout-full",
                    launcher: full
                )
                #expect(code == 20, "every completed result it could not print counts: \(String(describing: code))")
                #expect(
                    stderr.contains("skynet: standard output: No space left on device (the job goes on)"),
                    "\(stderr)"
                )
                let summary = format.isEmpty ? "20 completed" : #""completed":20"#
                #expect(stderr.contains(summary), "the summary, on standard error: \(stderr)")
                #expect(stderr.contains("standard output: results not recorded"), "\(stderr)")
            }
            // Standard output closed (`>&-`): the write fails and is said, and nothing lands in a
            // descriptor the process opened later in its place (libzmq's sockets and eventfds).
            let (closedCode, _, closedErr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--sectors", "20", "--work", "1ms"],
                name: "stdout-closed",
                launcher: ["/bin/sh", "-c", #"exec "$@" >&-"#, "sh"]
            )
            #expect(closedCode == 20, "\(String(describing: closedCode)) \(closedErr)")
            #expect(
                closedErr.contains("skynet: standard output: Bad file descriptor (the job goes on)"),
                "\(closedErr)"
            )
            // The demo's job too (its --json listing has no banner before the results).
            let (demoCode, _, demoErr) = try await self.run(
                ["demo", "--json", "--sectors", "4", "--work", "1ms", "--fail-every", "0", "--http", "off"],
                name: "demo-full",
                launcher: full
            )
            #expect(demoCode == 1, "\(String(describing: demoCode)) \(demoErr)")
            #expect(demoErr.contains("standard output: results not recorded"), "\(demoErr)")
            // A one-shot command says it too.
            let (code, _, stderr) = try await self.run(
                ["status", "--broker", cluster.frontend],
                name: "status-full",
                launcher: full
            )
            #expect(code == 255, "a command that could not do its work: \(String(describing: code))")
            #expect(stderr.contains("standard output: No space left on device"), "\(stderr)")
            await cluster.shutdown()
            // A detached job: its id is named in the error, and `results` on /dev/full fails too.
            let journal = try EndToEndTests.directory().appendingPathComponent("journal").path
            let durable = try await Cluster(workers: 1, brokerExtra: ["--journal", journal])
            let (detachCode, _, detachErr) = try await self.run(
                ["submit", "--broker", durable.frontend, "--sectors", "3", "--work", "1ms", "--detach"],
                name: "detach-full",
                launcher: full
            )
            #expect(detachCode == 255, "\(String(describing: detachCode)) \(detachErr)")
            let words = detachErr.split(separator: " ")
            let job = words.firstIndex(of: "job").map { String(words[$0 + 1]) } ?? ""
            #expect(TaskID(job) != nil && detachErr.contains("submitted (3 tasks"), "\(detachErr)")
            let (resultsCode, _, resultsErr) = try await self.run(
                ["results", job, "--broker", durable.frontend, "--follow"],
                name: "results-full",
                launcher: full
            )
            #expect(resultsCode == 255, "\(String(describing: resultsCode)) \(resultsErr)")
            #expect(resultsErr.contains("standard output: No space left on device"), "\(resultsErr)")
            await durable.shutdown()
        }

        // MARK: Outputs that agree

        @Test("status is answered at --max-coordinators and does not count itself")
        func statusNotACoordinator() async throws {
            let cluster = try await Cluster(workers: 1, brokerExtra: ["--max-coordinators", "1"])
            #expect(try await cluster.status().coordinators == 0, "an idle broker has no coordinator")
            let submit = try cluster.submit(["--sectors", "8", "--work", "1s"])
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased > 0 })
            let status = try await cluster.status()
            #expect(status.coordinators == 1, "the job's, not status's")
            submit.signal(SIGINT)
            _ = await submit.waitForExit(timeout: .seconds(10))
            await cluster.shutdown()
        }

        @Test("counters reconcile: local retries count as completed, tasks cancelled while queued are counted")
        func countersReconcile() async throws {
            let cluster = try await Cluster(workers: 1)
            // Every 5th attempt fails and is re-run locally: the job says 20 completed, and so must
            // the totals the dashboard shows.
            let submit = try cluster.submit(["--sectors", "20", "--work", "5ms", "--fail-every", "5"])
            #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
            var status = try await cluster.status()
            #expect(status.taskTotals.tasks == 20 && status.taskTotals.completed == 20, "\(status.taskTotals)")
            #expect(status.resultsFailed > 0, "some attempts failed on the worker")
            // Tasks of a kind no worker serves wait queued; Ctrl-C cancels them at the broker.
            let directory = try EndToEndTests.directory()
            let tasks = directory.appendingPathComponent("t.jsonl").path
            try (1...5).map { "{\"kind\": \"nope\", \"input\": \"\($0)\"}" }.joined(separator: "\n")
                .write(toFile: tasks, atomically: true, encoding: .utf8)
            let waiting = try cluster.submit(["--tasks", tasks], name: "waiting")
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.queued == 5 })
            waiting.signal(SIGINT)
            #expect(await waiting.waitForExit(timeout: .seconds(10)) == 130)
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.queued == 0 })
            status = try await cluster.status()
            #expect(status.resultsCancelled >= 5, "cancelled while queued: \(status.resultsCancelled)")
            #expect(
                status.submitted + status.recovered
                    == status.resultsCompleted + status.resultsFailed + status.resultsCancelled + status.queued
                    + status.leased,
                "\(status.submitted) accepted, \(status.resultsCompleted)/\(status.resultsFailed)/\(status.resultsCancelled)"
            )
            #expect(status.taskTotals.unfinished == 0 && status.taskTotals.cancelled == 5, "\(status.taskTotals)")
            await cluster.shutdown()
        }

        @Test("input: a NUL is an error naming the line; blank lines are tasks; FIFOs, <(cmd) and /dev/null are read")
        func inputsAsGNUParallelReadsThem() async throws {
            let directory = try EndToEndTests.directory()
            let cluster = try await Cluster(workers: 0)
            try await cluster.addWorker(name: "worker-a", extra: EndToEndTests.commandWorker)
            let nul = directory.appendingPathComponent("nul.jsonl").path
            try #"{"exec": ["sh", "-c", "echo $0", "abc\u0000def"]}"#.write(
                toFile: nul,
                atomically: true,
                encoding: .utf8
            )
            let (nulCode, _, nulErr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--tasks", nul],
                name: "nul"
            )
            #expect(nulCode == 255 && nulErr.contains("line 1") && nulErr.contains("NUL"), "\(nulErr)")

            let blank = directory.appendingPathComponent("blank").path
            try "a\n\nb\n".write(toFile: blank, atomically: true, encoding: .utf8)
            let (blankCode, blankOut, blankErr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--exec", #"sh -c 'echo "$1 [$2]"' x {#} {}"#, "--inputs",
                    blank, "-k",
                ],
                name: "blank"
            )
            #expect(blankCode == 0, "\(blankErr)")
            #expect(blankOut == "1 [a]\n2 []\n3 [b]\n", "\(blankOut)")

            let fifo = directory.appendingPathComponent("fifo").path
            #expect(mkfifo(fifo, 0o600) == 0)
            let writer = Task.detached {
                let fd = open(fifo, O_WRONLY)
                _ = POSIX.writeAll(fd, Array("p1\np2\n".utf8))
                close(fd)
            }
            let (fifoCode, fifoOut, fifoErr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--exec", "sh -c 'echo {}'", "--inputs", fifo, "-k"],
                name: "fifo"
            )
            await writer.value
            #expect(fifoCode == 0 && fifoOut == "p1\np2\n", "\(fifoErr)")

            let (nullCode, _, nullErr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--exec", "sh -c 'echo {}'", "--inputs", "/dev/null"],
                name: "devnull"
            )
            #expect(nullCode == 255 && nullErr.contains("holds no lines"), "\(nullErr)")
            await cluster.shutdown()
        }

        @Test("detached: --name names the job (across a restart); skynet jobs lists it; exec results read as attached")
        func detachedJobsReadable() async throws {
            let directory = try EndToEndTests.directory()
            let journal = directory.appendingPathComponent("broker.journal").path
            let cluster = try await Cluster(workers: 0, brokerExtra: ["--journal", journal])
            try await cluster.addWorker(name: "worker-a", extra: EndToEndTests.commandWorker)
            let (code, stdout, stderr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--exec", #"sh -c 'printf %s "$1"' x {}"#, "--inputs",
                    try EndToEndTests.inputs(["hello world"], in: directory), "--detach", "--name", "nightly-build",
                ],
                name: "detach-exec"
            )
            #expect(code == 0, "\(stderr)")
            let job = stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let (_, text, textErr) = try await self.run(
                ["results", job, "--follow", "--broker", cluster.frontend],
                name: "results"
            )
            #expect(text == "hello world", "standard output is the command's: \(text) \(textErr)")
            let (_, json, _) = try await self.run(
                ["results", job, "--follow", "--json", "--broker", cluster.frontend],
                name: "results-json"
            )
            let line = try #require(try EndToEndTests.execLines(json).first)
            #expect(line.exit_code == 0 && line.stdout == "hello world" && line.status == "completed", "\(json)")
            #expect(json.contains("\"pending_ids\""), "one JSON key style: \(json)")
            try await cluster.killAndRestartBroker()
            let (jobsCode, jobs, jobsErr) = try await self.run(["jobs", "--broker", cluster.frontend], name: "jobs")
            #expect(jobsCode == 0 && jobs.contains(job) && jobs.contains("nightly-build"), "\(jobs) \(jobsErr)")
            #expect(jobs.contains("finished  1/1 finished"), "\(jobs)")
            await cluster.shutdown()
        }

        @Test("input streams: a line's task runs while the input is still open (tail -f | skynet submit)")
        func inputsStream() async throws {
            let directory = try EndToEndTests.directory()
            let cluster = try await Cluster(workers: 0)
            try await cluster.addWorker(name: "worker-a", extra: EndToEndTests.commandWorker)
            let fifo = directory.appendingPathComponent("lines").path
            #expect(mkfifo(fifo, 0o600) == 0)
            let submit = try cluster.submit(["--exec", #"sh -c 'echo "got $1"' x {}"#, "--inputs", fifo])
            let writer = open(fifo, O_WRONLY)
            #expect(writer >= 0)
            _ = POSIX.writeAll(writer, Array("first\n".utf8))
            #expect(
                await submit.waitForStdout(timeout: .seconds(15)) { $0.contains("got first") },
                "the first line ran before the input ended: \(submit.stderr)"
            )
            _ = POSIX.writeAll(writer, Array("second\n".utf8))
            close(writer)
            #expect(await submit.waitForExit(timeout: .seconds(15)) == 0, "\(submit.stderr)")
            #expect(submit.stdout == "got first\ngot second\n", "\(submit.stdout)")
            await cluster.shutdown()
        }

        // MARK: One-line errors and the obvious commands

        @Test("the instruction and allocation scripts given a --skynet that is a directory or missing: one line")
        func instructionScriptsCheckTheBinary() async throws {
            let directory = try EndToEndTests.directory()
            let missing = directory.appendingPathComponent("no-such-skynet").path
            for script in ["bench/instructions.py", "bench/deep_instructions.py", "bench/allocations.py"] {
                for binary in [directory.path, missing] {
                    let process = try ChildProcess(
                        executable: "/usr/bin/env",
                        ["python3", SkynetBinary.packageRoot.appendingPathComponent(script).path, "--skynet", binary],
                        name: "instructions-check",
                        directory: directory
                    )
                    let status = await process.waitForExit(timeout: .seconds(20))
                    if status == nil { _ = await process.stop() }
                    let lines = process.stderr.split(separator: "\n").filter { !$0.isEmpty }
                    #expect(status != nil && status != 0, "\(script) \(binary): \(String(describing: status))")
                    #expect(
                        lines.count == 1 && lines[0].contains("is not an executable file"),
                        "\(script) \(binary): \(process.stderr)"
                    )
                }
            }
        }

        @Test("a directory given as a key is said to be a directory; a refused key is one line, once")
        func keyMistakes() async throws {
            let cluster = try await Cluster(workers: 0, curve: true)
            let keys = try #require(cluster.keys)
            let (code, _, stderr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--sectors", "1", "--curve-secret", keys.directory.path,
                    "--broker-key", keys.publicFile("broker").path,
                ],
                name: "dir-key"
            )
            #expect(code != 0 && stderr.contains("is a directory") && !stderr.contains("chmod"), "\(stderr)")
            try await keys.add("stranger", allow: nil)
            let (strangerCode, _, strangerErr) = try await self.run(
                ["submit", "--broker", cluster.frontend, "--sectors", "1"] + keys.arguments(for: "stranger"),
                name: "stranger"
            )
            #expect(strangerCode != 0 && strangerErr.contains("refused this key"), "\(strangerErr)")
            let lines = strangerErr.split(separator: "\n").filter { !$0.isEmpty }
            #expect(lines.count == 1, "one line: \(strangerErr)")
            await cluster.shutdown()
        }

        @Test(
            "exit statuses a script can rely on: 255 when a command could not run at all, else the tasks not completed"
        )
        func exitStatuses() async throws {
            let nowhere = "tcp://127.0.0.1:9"
            for arguments in [
                ["submit", "--broker", nowhere, "--sectors", "2", "--connect-timeout", "500ms"],
                ["status", "--broker", nowhere, "--timeout", "500ms"],
                ["results", TaskID.random().description, "--broker", nowhere, "--timeout", "500ms"],
                ["cancel", TaskID.random().description, "--broker", nowhere, "--timeout", "500ms"],
                ["submit", "--sectors", "0"],
                ["submit", "--tasks", "/nonexistent/tasks.jsonl"],
            ] {
                let (code, _, stderr) = try await self.run(arguments, name: "unrunnable")
                #expect(code == 255, "\(arguments): \(String(describing: code)) \(stderr)")
                #expect(stderr.hasPrefix("Error: "), "\(stderr)")
            }
            // Tasks that ran and failed still count as GNU parallel counts them.
            let cluster = try await Cluster(workers: 1)
            let (failed, _, failedErr) = try await self.run(
                [
                    "submit", "--broker", cluster.frontend, "--sectors", "3", "--work", "1ms", "--fail-every", "1",
                    "--retry", "none",
                ],
                name: "failing"
            )
            #expect(failed == 3, "\(failedErr)")
            await cluster.shutdown()
        }

        @Test("a worker says when it registered, and that it cannot reach a broker it never reached")
        func workerReachability() async throws {
            let cluster = try await Cluster(workers: 0)
            let worker = try await cluster.addWorker(name: "worker-a")
            #expect(
                await worker.waitForStdout(timeout: .seconds(5)) { _ in
                    worker.stderr.contains("registered with the broker")
                }
            )
            let lonely = try Spawned(
                ["worker", "--broker", "tcp://127.0.0.1:9", "--heartbeat", "200ms", "--name", "lonely"],
                name: "lonely"
            )
            #expect(
                await lonely.waitForStdout(timeout: .seconds(10)) { _ in
                    lonely.stderr.contains("cannot reach the broker")
                }
            )
            #expect(!lonely.stderr.contains("lost the broker"), "\(lonely.stderr)")
            await lonely.stop()
            await cluster.shutdown()
        }
    }
}
