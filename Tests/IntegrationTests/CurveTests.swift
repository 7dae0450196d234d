import Foundation
import SkyNet
import SkyNetCLI
import Testing

/// CURVE with real processes: allowlists per port, readable refusals, revocation, ownership of
/// detached jobs by key, wrong ports. An extension of ``EndToEndTests``, so it is serialized with
/// the other process tests.
extension EndToEndTests {
    /// Runs `skynet ARGS` to its end (bounded) and returns its exit status and standard error.
    func finish(
        _ arguments: [String],
        name: String,
        within timeout: Duration = .seconds(15)
    ) async throws -> (
        Int32?, String
    ) {
        let process = try Spawned(arguments, name: name)
        let status = await process.waitForExit(timeout: timeout)
        if status == nil { await process.stop() }
        return (status, process.stderr)
    }

    @Test("CURVE: allowed keys complete a job; every other client is refused with its reason, and queues nothing")
    func curveAllowlists() async throws {
        let cluster = try await Cluster(workers: 1, curve: true)
        let keys = try #require(cluster.keys)
        try await keys.add("stranger", allow: nil)
        let submit = try cluster.submit(["--sectors", "40", "--work", "5ms", "--fail-every", "0", "--json"])
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "submit: \(submit.stderr)")
        let (results, _) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 40 && results.allSatisfy { $0.status == "completed" && $0.system == "worker-a" })

        let frontend = ["submit", "--broker", cluster.frontend, "--sectors", "3", "--no-progress"]
        let backend = ["submit", "--broker", cluster.backend, "--sectors", "3", "--no-progress"]
        let refusals: [([String], String)] = [
            (frontend + keys.arguments(for: "stranger"), "refused this key (not in its coordinators' allowlist"),
            (frontend, "requires CURVE"),
            (frontend + keys.arguments(for: "worker"), "refused this key (not in its coordinators' allowlist"),
            (backend + keys.arguments(for: "coordinator"), "refused this key (not in its coordinators' allowlist"),
            (
                frontend + [
                    "--curve-secret", keys.secretFile("coordinator").path, "--broker-key",
                    keys.publicFile("worker").path,
                ],
                "wrong --broker-key"
            ),
            (
                ["worker", "--broker", cluster.frontend, "--name", "x"] + keys.arguments(for: "worker"),
                "refused this key (not in its workers' allowlist; or this is its coordinators' port"
            ),
            (
                ["worker", "--broker", cluster.backend, "--name", "x"] + keys.arguments(for: "stranger"),
                "refused this key (not in its workers' allowlist"
            ),
        ]
        for (arguments, message) in refusals {
            let (status, stderr) = try await self.finish(arguments, name: "refused")
            #expect(status != nil && status != 0, "\(arguments): \(stderr)")
            #expect(stderr.contains(message), "\(arguments): \(stderr)")
        }
        let status = try await cluster.status()
        await cluster.shutdown()
        #expect(status.curve && status.submitted == 40, "no refused client queued a task: \(status)")
        #expect(status.refusedHandshakes >= 5 && status.workers.count == 1, "\(status)")
    }

    @Test("CURVE: a key removed from an allowlist is refused at its next connection, and at once while connected")
    func curveRevocation() async throws {
        let cluster = try await Cluster(workers: 1, curve: true)
        let keys = try #require(cluster.keys)
        try await keys.add("second", allow: "workers")
        // The broker reads the changed directory within a heartbeat.
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.allowedWorkers == 2 })
        let second = try Spawned(
            ["worker", "--broker", cluster.backend, "--name", "second"] + keys.arguments(for: "second"),
            name: "second"
        )
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.workers.count == 2 })
        try FileManager.default.removeItem(at: keys.allowlist("workers").appendingPathComponent("second.key"))
        // The broker notices the directory changed (every heartbeat) and refuses the connected
        // worker's next message: it is told, and stops with the reason.
        let exit = await second.waitForExit(timeout: .seconds(10))
        #expect(exit != nil && exit != 0, "\(second.stderr)")
        #expect(second.stderr.contains("removed from the broker's workers' allowlist"), "\(second.stderr)")
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.workers.count == 1 })
        // Started again, it is refused in the handshake.
        let (status, stderr) = try await self.finish(
            ["worker", "--broker", cluster.backend, "--name", "second"] + keys.arguments(for: "second"),
            name: "second-again"
        )
        #expect(status != nil && status != 0 && stderr.contains("not in its workers' allowlist"), "\(stderr)")
        // The other worker still works.
        let submit = try cluster.submit(["--sectors", "10", "--work", "1ms", "--fail-every", "0", "--json"])
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
        await cluster.shutdown()
    }

    @Test("CURVE: a detached job belongs to the key that submitted it; another key cannot see or cancel it")
    func curveJobOwnership() async throws {
        let journal = try JournalPath()
        let cluster = try await Cluster(workers: 0, brokerExtra: ["--journal", journal.path], curve: true)
        let keys = try #require(cluster.keys)
        try await keys.add("other", allow: "coordinators")
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.allowedCoordinators == 2 })
        let submit = try cluster.submit(["--sectors", "5", "--detach"])
        #expect(await submit.waitForExit(timeout: .seconds(15)) == 0, "\(submit.stderr)")
        let job = submit.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let owner = ["--broker", cluster.frontend] + keys.arguments(for: "coordinator")
        let other = ["--broker", cluster.frontend] + keys.arguments(for: "other")
        let (read, readErr) = try await self.finish(["results", job] + other, name: "results-other")
        #expect(read != nil && read != 0 && readErr.contains("unknown job"), "\(readErr)")
        let (cancel, cancelErr) = try await self.finish(["cancel", job] + other, name: "cancel-other")
        #expect(cancel != nil && cancel != 0 && cancelErr.contains("unknown job"), "\(cancelErr)")
        let mine = try Spawned(["results", job, "--json"] + owner, name: "results-owner")
        #expect(await mine.waitForExit(timeout: .seconds(15)) != nil, "\(mine.stderr)")
        #expect(mine.stdout.contains("\"pending\":5"), "\(mine.stdout)")
        let (cancelled, _) = try await self.finish(["cancel", job] + owner, name: "cancel-owner")
        #expect(cancelled == 0)
        await cluster.shutdown()
    }

    @Test("keys on disk: a secret file readable by others is refused, so is a missing one")
    func curveKeyFiles() async throws {
        let keys = try await TestKeys()
        chmod(keys.secretFile("coordinator").path, 0o644)
        let arguments = ["submit", "--broker", "tcp://127.0.0.1:9", "--sectors", "1"]
        let (status, stderr) = try await self.finish(arguments + keys.arguments(for: "coordinator"), name: "open")
        #expect(status != nil && status != 0 && stderr.contains("chmod 600"), "\(stderr)")
        let (missing, missingErr) = try await self.finish(
            arguments + [
                "--curve-secret", "/nonexistent/c.key_secret", "--broker-key", keys.publicFile("broker").path,
            ],
            name: "missing"
        )
        #expect(missing != nil && missing != 0 && missingErr.contains("/nonexistent/c.key_secret"), "\(missingErr)")
        let (half, halfErr) = try await self.finish(
            arguments + ["--broker-key", keys.publicFile("broker").path],
            name: "half"
        )
        #expect(half != nil && half != 0 && halfErr.contains("--broker-key needs --curve-secret"), "\(halfErr)")
    }

    @Test("wrong ports: a worker on the coordinators' port and a coordinator on the workers' port are told, and exit")
    func wrongPorts() async throws {
        let cluster = try await Cluster(workers: 0)
        let (worker, workerErr) = try await self.finish(
            ["worker", "--broker", cluster.frontend, "--name", "lost"],
            name: "worker-on-frontend"
        )
        #expect(worker != nil && worker != 0, "\(workerErr)")
        #expect(
            workerErr.contains("is the broker's coordinators' port; workers connect to its backend"),
            "\(workerErr)"
        )
        let (submit, submitErr) = try await self.finish(
            ["submit", "--broker", cluster.backend, "--sectors", "2", "--no-progress"],
            name: "submit-on-backend"
        )
        #expect(submit != nil && submit != 0, "\(submitErr)")
        #expect(
            submitErr.contains("is the broker's workers' port; coordinators connect to its frontend"),
            "\(submitErr)"
        )
        await cluster.shutdown()
    }

    @Test("a broker refuses a non-loopback address without CURVE unless --insecure")
    func insecureRefused() async throws {
        let (status, stderr) = try await self.finish(
            ["broker", "--frontend", "tcp://0.0.0.0:*", "--backend", "tcp://127.0.0.1:*"],
            name: "exposed"
        )
        #expect(status != nil && status != 0, "\(stderr)")
        #expect(stderr.contains("is not a loopback address: turn CURVE on"), "\(stderr)")
    }

    @Test(
        "limits: a worker past --max-workers is refused and exits; a coordinator past --max-queued-per-coordinator is slowed, not failed"
    )
    func brokerLimits() async throws {
        let cluster = try await Cluster(
            workers: 1,
            brokerExtra: ["--max-workers", "1", "--max-queued-per-coordinator", "5"]
        )
        let (worker, workerErr) = try await self.finish(
            ["worker", "--broker", cluster.backend, "--name", "extra"],
            name: "extra-worker"
        )
        #expect(worker != nil && worker != 0 && workerErr.contains("at its limit of 1 workers"), "\(workerErr)")
        // 40 tasks of 50 ms on 4 slots with room for 5 at the broker: backpressure, every one completes.
        let submit = try cluster.submit(["--sectors", "40", "--work", "50ms", "--fail-every", "0", "--retry", "none"])
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
        #expect(submit.stdout.contains("Slowed down: the broker has no room for more"), "\(submit.stdout)")
        #expect(submit.stdout.contains("Summary: 40 tasks, 40 completed, 0 failed"), "\(submit.stdout)")
        let status = try await cluster.status()
        #expect(status.dispatched == 40, "each task went to a worker once: \(status.dispatched)")
        await cluster.shutdown()
    }
}
