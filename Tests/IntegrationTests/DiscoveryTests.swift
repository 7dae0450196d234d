import Foundation
import Logging
import SkyNet
import SkyNetCLI
import Testing

/// Workers that find their broker on the LAN (`skynet broker --announce`, `--discover`): brokers,
/// an impostor and a worker on separate hosts (network namespaces on one bridge).
@Suite("Discovery", .serialized)
struct DiscoveryTests {
    /// Waits for `needle` in a process's standard error.
    private func log(_ process: Spawned, _ needle: String, within timeout: Duration = .seconds(15)) async -> Bool {
        await process.waitForStderr(timeout: timeout) { $0.contains(needle) }
    }

    @Test(
        "with CURVE: a worker with no address joins the pinned broker on another host, ignores an impostor, drops a broker that stops announcing and follows the next",
        .enabled(if: VirtualHosts.available, "needs root and iproute2 for network namespaces")
    )
    func curveDiscovery() async throws {
        let hosts = try VirtualHosts([("b1", 1), ("w", 2), ("imp", 3), ("b2", 4)])
        let keys = try await TestKeys()
        try await keys.add("impostor", allow: nil)
        // The worker is given a directory of broker keys (here one): a pool's pinned brokers.
        let pinned = keys.directory.appendingPathComponent("pinned")
        try FileManager.default.createDirectory(at: pinned, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: keys.publicFile("broker"), to: pinned.appendingPathComponent("broker.key"))
        let common = ["--frontend", "tcp://*:5555", "--backend", "tcp://*:5556", "--announce", "--heartbeat", "500ms"]
        var processes: [Spawned] = []
        defer { for process in processes where process.isRunning { process.signal(SIGKILL) } }

        // The impostor announces first, with its own key and an allowlist that would take this worker.
        var impostorArguments = keys.brokerArguments
        impostorArguments[1] = keys.secretFile("impostor").path
        let impostor = try Spawned(
            ["broker"] + common + impostorArguments,
            name: "impostor",
            launcher: hosts.launcher("imp")
        )
        processes.append(impostor)
        #expect(await impostor.listeningEndpoints(timeout: .seconds(10)) != nil, "\(impostor.stderr)")
        let broker = try Spawned(["broker"] + common + keys.brokerArguments, name: "b1", launcher: hosts.launcher("b1"))
        processes.append(broker)
        #expect(await broker.listeningEndpoints(timeout: .seconds(10)) != nil, "\(broker.stderr)")

        let worker = try Spawned(
            [
                "worker", "--discover", "--name", "w", "--heartbeat", "500ms", "--curve-secret",
                keys.secretFile("worker").path,
                "--broker-key", pinned.path,
            ],
            name: "worker",
            launcher: hosts.launcher("w")
        )
        processes.append(worker)
        #expect(await self.log(worker, "ignoring the beacon from 10.77.0.3"), "\(worker.stderr)")
        #expect(await self.log(worker, "registered with the broker"), "\(worker.stderr)")
        #expect(worker.stderr.contains("broker=tcp://10.77.0.1:5556"), "\(worker.stderr)")

        // A coordinator on the worker's host finds the broker the same way.
        let submit = try Spawned(
            ["submit", "--discover", "--sectors", "40", "--work", "0", "--json"] + keys.arguments(for: "coordinator"),
            name: "submit",
            launcher: hosts.launcher("w")
        )
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)")
        let (results, _) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 40 && results.allSatisfy { $0.status == "completed" && $0.system == "w" })
        #expect(!impostor.stderr.contains("worker registered"), "the impostor got a worker: \(impostor.stderr)")

        // The broker stops (and with it its beacon): the worker drops it within the expiry (5 s).
        _ = await broker.stop()
        #expect(
            await self.log(worker, "dropped the broker at tcp://10.77.0.1:5556", within: .seconds(12)),
            "\(worker.stderr)"
        )
        // Another pinned broker starts announcing on another host: the worker follows it.
        let second = try Spawned(["broker"] + common + keys.brokerArguments, name: "b2", launcher: hosts.launcher("b2"))
        processes.append(second)
        #expect(await second.listeningEndpoints(timeout: .seconds(10)) != nil, "\(second.stderr)")
        #expect(await self.log(worker, "following the broker at tcp://10.77.0.4:5556"), "\(worker.stderr)")
        #expect(
            await second.waitForStderr(timeout: .seconds(15)) { $0.contains("worker registered") },
            "\(worker.stderr)"
        )
        let again = try Spawned(
            ["submit", "--broker", "tcp://10.77.0.4:5555", "--sectors", "20", "--work", "0", "--json"]
                + keys.arguments(for: "coordinator"),
            name: "submit2",
            launcher: hosts.launcher("w")
        )
        #expect(await again.waitForExit(timeout: .seconds(30)) == 0, "\(again.stderr)")
        #expect(try parseJSONOutput(again.stdout).results.allSatisfy { $0.system == "w" })
        #expect(!impostor.stderr.contains("worker registered"), "the impostor got a worker: \(impostor.stderr)")
        #expect(await worker.stop() == 0, "\(worker.stderr)")
        for process in [second, impostor] { _ = await process.stop() }
    }

    @Test(
        "without CURVE: discovery follows a broker off this host only with --insecure, and submit --discover gives up with one line",
        .enabled(if: VirtualHosts.available, "needs root and iproute2 for network namespaces")
    )
    func plainDiscovery() async throws {
        let hosts = try VirtualHosts([("b", 1), ("w", 2)])
        let broker = try Spawned(
            ["broker", "--frontend", "tcp://*:5555", "--backend", "tcp://*:5556", "--insecure", "--announce"],
            name: "broker",
            launcher: hosts.launcher("b")
        )
        var processes = [broker]
        defer { for process in processes where process.isRunning { process.signal(SIGKILL) } }
        #expect(await broker.listeningEndpoints(timeout: .seconds(10)) != nil, "\(broker.stderr)")

        let refused = try Spawned(["worker", "--discover"], name: "refused", launcher: hosts.launcher("w"))
        processes.append(refused)
        #expect(
            await self.log(refused, "without CURVE, discovery follows only brokers on this host"),
            "\(refused.stderr)"
        )
        let submit = try Spawned(
            ["submit", "--discover", "--discover-wait", "3s", "--sectors", "5"],
            name: "submit",
            launcher: hosts.launcher("w")
        )
        let started = ContinuousClock.now
        let code = await submit.waitForExit(timeout: .seconds(15))
        #expect(code == 255, "exit \(String(describing: code)): \(submit.stderr)")
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(
            submit.stderr.contains("Error: no broker heard on UDP port 5670 within 3.0 seconds"),
            "\(submit.stderr)"
        )
        #expect(!refused.stderr.contains("registered with the broker"))
        _ = await refused.stop()

        let insecure = try Spawned(
            ["worker", "--discover", "--insecure", "--name", "w"],
            name: "insecure",
            launcher: hosts.launcher("w")
        )
        processes.append(insecure)
        #expect(await self.log(insecure, "registered with the broker"), "\(insecure.stderr)")
        // Garbage on the beacon port, from another host: logged once, ignored, nothing breaks.
        let garbage = """
            import os, socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            for payload in [os.urandom(600), b"SKYNET/1 role=single", b"\\xff" * 40, b""] * 50:
                s.sendto(payload, ("10.77.0.255", 5670))
            """
        try runCommand(
            VirtualHosts.ipPath ?? "ip",
            ["netns", "exec", hosts.namespace("b"), "python3", "-c", garbage]
        )
        #expect(
            await self.log(insecure, "ignoring the beacon from 10.77.0.1: not a SkyNet beacon"),
            "\(insecure.stderr)"
        )
        #expect(Cluster.count("not a SkyNet beacon", in: insecure.stderr) == 1, "\(insecure.stderr)")
        let job = try Spawned(
            ["submit", "--discover", "--insecure", "--sectors", "10", "--work", "0", "--json"],
            name: "job",
            launcher: hosts.launcher("w")
        )
        #expect(await job.waitForExit(timeout: .seconds(30)) == 0, "\(job.stderr)")
        #expect(try parseJSONOutput(job.stdout).results.allSatisfy { $0.status == "completed" && $0.system == "w" })
        _ = await insecure.stop()
        _ = await broker.stop()
    }
}

extension DiscoveryTests {
    @Test(
        "HA: brokers announce their roles; a worker with --discover follows the group, and after the leader's kill -9 the standby announces itself leader and runs the next job",
        .enabled(
            if: LocalEtcd.available || ProcessInfo.processInfo.environment["CI"] == "true",
            "etcd-server is missing (apt-get install etcd-server; .ci/run installs it)"
        )
    )
    func haRoles() async throws {
        let etcd = try await LocalEtcd(count: 1)
        let ports = try LocalEtcd.freePorts(5)
        let beaconPort = ports[4]
        func broker(_ index: Int) throws -> Spawned {
            try Spawned(
                [
                    "broker", "--etcd", etcd.endpoints[0], "--frontend", "tcp://127.0.0.1:\(ports[index * 2])",
                    "--backend", "tcp://127.0.0.1:\(ports[index * 2 + 1])", "--announce", "--announce-port",
                    "\(beaconPort)", "--lease-ttl", "2s",
                ],
                name: "ha-announce-\(index)"
            )
        }
        let first = try broker(0)
        defer { first.signal(SIGKILL) }
        #expect(await first.waitForStderr(timeout: .seconds(15)) { $0.contains("leading: serving") }, "\(first.stderr)")
        let second = try broker(1)
        defer { second.signal(SIGKILL) }
        #expect(await second.waitForStderr(timeout: .seconds(15)) { $0.contains("standing by") }, "\(second.stderr)")

        // What the LAN hears, with the listener the worker uses.
        let listener = try BeaconListener(
            port: UInt16(beaconPort),
            trust: BeaconTrust(keys: nil, insecure: false),
            logger: Logger(label: "test")
        )
        defer { listener.stop() }
        func roles(within timeout: Duration, _ expected: [String: Beacon.Role]) async -> [String: Beacon.Role] {
            let deadline = ContinuousClock.now + timeout
            var heard: [String: Beacon.Role] = [:]
            while ContinuousClock.now < deadline {
                heard = Dictionary(listener.brokers().map { ($0.backend, $0.beacon.role) }, uniquingKeysWith: { $1 })
                if heard == expected { break }
                try? await Task.sleep(for: .milliseconds(100))
            }
            return heard
        }
        let backends = [1, 3].map { "tcp://127.0.0.1:\(ports[$0])" }
        let both = await roles(within: .seconds(10), [backends[0]: .leader, backends[1]: .standby])
        #expect(both == [backends[0]: .leader, backends[1]: .standby])

        let worker = try Spawned(
            ["worker", "--discover", "--discover-port", "\(beaconPort)", "--name", "w"],
            name: "ha-w"
        )
        defer { worker.signal(SIGKILL) }
        #expect(await worker.waitForStderr(timeout: .seconds(15)) { $0.contains("registered with the broker") })
        // The leader, and the group's members to fall back on.
        #expect(
            worker.stderr.contains("registered with the broker") && worker.stderr.contains("broker=\(backends[0])"),
            "\(worker.stderr)"
        )

        first.signal(SIGKILL)
        // The standby takes the lead within the lease (2 s) and says so in its beacon; the dead
        // leader's beacon is gone.
        let after = await roles(within: .seconds(15), [backends[1]: .leader])
        #expect(after == [backends[1]: .leader], "\(second.stderr.suffix(800))")
        let submit = try Spawned(
            ["submit", "--discover", "--discover-port", "\(beaconPort)", "--sectors", "20", "--work", "0", "--json"],
            name: "ha-submit"
        )
        #expect(await submit.waitForExit(timeout: .seconds(30)) == 0, "\(submit.stderr)\n\(worker.stderr.suffix(800))")
        #expect(try parseJSONOutput(submit.stdout).results.allSatisfy { $0.status == "completed" && $0.system == "w" })
        _ = await worker.stop()
        _ = await second.stop()
        await etcd.stop()
    }
}
