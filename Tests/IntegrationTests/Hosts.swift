import Foundation
@testable import SkyNet
@testable import SkyNetCore
import SkyNetCLI
import Synchronization
import Testing

/// Separate hosts on one machine: a network namespace per host, each joined by a veth link to a
/// bridge in a "switch" namespace (a star, like hosts on one LAN). Needs root and iproute2; nothing
/// touches the machine's own network namespace, and everything is deleted when this object goes.
final class VirtualHosts {
    /// Root and `ip` are there (CI runs as root).
    static var available: Bool {
        getuid() == 0 && Self.ipPath != nil
    }

    static var ipPath: String? {
        ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }

    private static let instances = Atomic<Int>(0)

    /// Host name → address (10.77.0.0/24).
    let addresses: [String: String]
    private let prefix: String
    private var created: [String] = []

    /// - Parameter hosts: names (short: they become namespace names) and the last octet of each address.
    init(_ hosts: [(name: String, octet: Int)]) throws {
        // One prefix per instance, not per process: suites run in parallel, and two sets of hosts
        // with one prefix would share (and delete) one switch namespace.
        self.prefix = "skn\(getpid() % 100_000)-\(Self.instances.add(1, ordering: .relaxed).oldValue)"
        self.addresses = Dictionary(uniqueKeysWithValues: hosts.map { ($0.name, "10.77.0.\($0.octet)") })
        let switchNamespace = "\(self.prefix)-sw"
        do {
            try self.addNamespace(switchNamespace)
            try Self.ip(["-n", switchNamespace, "link", "add", "br0", "type", "bridge"])
            try Self.ip(["-n", switchNamespace, "link", "set", "br0", "up"])
            for (index, host) in hosts.enumerated() {
                let namespace = self.namespace(host.name)
                try self.addNamespace(namespace)
                let port = "p\(index)"
                try Self.ip([
                    "link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", port, "netns",
                    switchNamespace,
                ])
                try Self.ip(["-n", switchNamespace, "link", "set", port, "master", "br0"])
                try Self.ip(["-n", switchNamespace, "link", "set", port, "up"])
                try Self.ip(["-n", namespace, "addr", "add", "10.77.0.\(host.octet)/24", "dev", "eth0"])
                try Self.ip(["-n", namespace, "link", "set", "eth0", "up"])
            }
        } catch {
            self.removeAll()
            throw error
        }
    }

    deinit { self.removeAll() }

    func namespace(_ host: String) -> String { "\(self.prefix)-\(host)" }

    /// The command that runs a program on `host`.
    func launcher(_ host: String) -> [String] {
        [Self.ipPath ?? "ip", "netns", "exec", self.namespace(host)]
    }

    /// Cuts (or restores) the host's link, as if its cable were pulled.
    func setLink(_ host: String, up: Bool) throws {
        try Self.ip(["-n", self.namespace(host), "link", "set", "eth0", up ? "up" : "down"])
    }

    private func addNamespace(_ name: String) throws {
        // A namespace left by an earlier run with the same PID would make `add` fail.
        _ = try? Self.ip(["netns", "delete", name])
        try Self.ip(["netns", "add", name])
        self.created.append(name)
        try Self.ip(["-n", name, "link", "set", "lo", "up"])
    }

    private func removeAll() {
        for name in self.created.reversed() { _ = try? Self.ip(["netns", "delete", name]) }
        self.created.removeAll()
    }

    /// Runs `ip` with a 10 s bound; throws with its error output when it fails.
    @discardableResult
    static func ip(_ arguments: [String]) throws -> String {
        guard let path = Self.ipPath else { throw TestFailure("no ip command (iproute2)") }
        return try runCommand(path, arguments)
    }
}

extension EndToEndTests {
    /// Broker, three workers and the coordinator on five hosts. Heartbeats every 500 ms (dead after 3
    /// missed), so a cut worker is declared lost 1.5–2 s after it last spoke.
    @Test(
        "across hosts: a worker host's link is cut mid-run, its tasks run elsewhere within 3 s, it rejoins when the link returns",
        .enabled(if: VirtualHosts.available, "needs root and iproute2 for network namespaces")
    )
    func acrossHosts() async throws {
        let hosts = try VirtualHosts([("broker", 1), ("coord", 2), ("w1", 11), ("w2", 12), ("w3", 13)])
        let brokerAddress = hosts.addresses["broker"]!
        let frontend = "tcp://\(brokerAddress):5555"
        let backend = "tcp://\(brokerAddress):5556"
        let heartbeat = ["--heartbeat", "500ms"]
        // CURVE on, as across real hosts (the broker binds a non-loopback address).
        let keys = try await TestKeys()
        let broker = try Spawned(
            ["broker", "--frontend", frontend, "--backend", backend] + heartbeat + keys.brokerArguments,
            name: "broker",
            launcher: hosts.launcher("broker")
        )
        var workers: [Spawned] = []
        defer {
            for process in workers + [broker] where process.isRunning { process.signal(SIGKILL) }
        }
        #expect(await broker.listeningEndpoints(timeout: .seconds(10)) != nil, "\(broker.stderr)")
        func status() async throws -> BrokerStatus {
            let process = try Spawned(
                ["status", "--broker", frontend, "--json"] + keys.arguments(for: "coordinator"),
                name: "status",
                launcher: hosts.launcher("coord")
            )
            guard await process.waitForExit(timeout: .seconds(10)) == 0 else {
                throw TestFailure("status failed: \(process.stderr)")
            }
            return try BrokerStatus.parse(process.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }

        /// Polls the broker's STATUS (from the coordinator's host) until `predicate` holds.
        func waitForStatus(timeout: Duration, _ predicate: (BrokerStatus) -> Bool) async throws -> Bool {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if predicate(try await status()) { return true }
                try await Task.sleep(for: .milliseconds(50))
            }
            return false
        }

        for host in ["w1", "w2", "w3"] {
            workers.append(
                try Spawned(
                    ["worker", "--broker", backend, "--name", host] + heartbeat + keys.arguments(for: "worker"),
                    name: host,
                    launcher: hosts.launcher(host)
                )
            )
        }
        #expect(try await waitForStatus(timeout: .seconds(10)) { $0.workers.count == 3 })

        let submit = try Spawned(
            ["submit", "--broker", frontend, "--sectors", "240", "--work", "250ms", "--fail-every", "0", "--json"]
                + keys.arguments(for: "coordinator"),
            name: "submit",
            launcher: hosts.launcher("coord")
        )
        // Wait until w1 is busy, then pull its cable.
        let clock = ContinuousClock()
        var busy = false
        let busyDeadline = clock.now + .seconds(15)
        while clock.now < busyDeadline {
            if try await status().workers.contains(where: { $0.name == "w1" && $0.leased == 4 }) {
                busy = true
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(busy, "w1 never had 4 tasks")
        let before = try await status().requeued
        try hosts.setLink("w1", up: false)
        let cut = clock.now
        var redispatched: Duration?
        while clock.now - cut < .seconds(10) {
            let snapshot = try await status()
            if snapshot.requeued >= before + 4 {
                redispatched = clock.now - cut
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(
            redispatched != nil && redispatched! < .seconds(3),
            "requeued after \(redispatched.map(seconds) ?? "never")"
        )

        // The link comes back: w1 notices it was dropped and registers again.
        let registrations = try await status().workersRegistered
        try hosts.setLink("w1", up: true)
        let restored = clock.now
        let rejoined = try await waitForStatus(timeout: .seconds(20)) { $0.workersRegistered > registrations }
        let rejoin = clock.now - restored
        #expect(rejoined, "w1 did not rejoin: \(workers[0].stderr.suffix(1500))")

        let exit = await submit.waitForExit(timeout: .seconds(60))
        #expect(exit == 0, "submit: \(submit.stderr.suffix(1500))")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 240 && Set(results.map(\.id)).count == 240, "one final result per task")
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(summary.requeued >= 4)
        print(
            "across hosts: link_cut_to_redispatch_s=\(redispatched.map(seconds) ?? "-") rejoin_after_link_up_s=\(seconds(rejoin)) requeued=\(summary.requeued) duplicates_dropped=\(summary.duplicates)"
        )
        for process in workers { _ = await process.stop() }
        _ = await broker.stop()
    }

    @Test(
        "across hosts: commands run on workers in other namespaces, with CURVE, and their output comes back",
        .enabled(if: VirtualHosts.available, "needs root and iproute2 for network namespaces")
    )
    func commandsAcrossHosts() async throws {
        let hosts = try VirtualHosts([("broker", 1), ("coord", 2), ("w1", 11), ("w2", 12)])
        let frontend = "tcp://\(hosts.addresses["broker"]!):5555"
        let backend = "tcp://\(hosts.addresses["broker"]!):5556"
        let keys = try await TestKeys()
        let broker = try Spawned(
            ["broker", "--frontend", frontend, "--backend", backend] + keys.brokerArguments,
            name: "broker",
            launcher: hosts.launcher("broker")
        )
        var workers: [Spawned] = []
        defer {
            for process in workers + [broker] where process.isRunning { process.signal(SIGKILL) }
        }
        #expect(await broker.listeningEndpoints(timeout: .seconds(10)) != nil, "\(broker.stderr)")
        // The namespaces share this host's files, as hosts share a network file system.
        let directory = try Self.directory(
            (1...12).reduce(into: [String: String]()) {
                $0["part-\($1).log"] = String(repeating: "log line \($1)\n", count: 500)
            }
        )
        for host in ["w1", "w2"] {
            workers.append(
                try Spawned(
                    ["worker", "--broker", backend, "--name", host, "--slots", "2", "--allow-command", "/bin/sh"]
                        + EndToEndTests.runAs + keys.arguments(for: "worker"),
                    name: host,
                    launcher: hosts.launcher(host)
                )
            )
        }
        let names = (1...12).map { "part-\($0).log" }
        let joblog = directory.appendingPathComponent("jobs.tsv").path
        // Each command takes a little while, so that both hosts get some.
        let submit = try Spawned(
            [
                "submit", "--broker", frontend, "--exec", "sh -c 'sleep 0.2; sha256sum \"$1\"' _ {}", "--inputs",
                try Self.inputs(names, in: directory), "--workdir", directory.path, "--joblog", joblog, "-k",
                "--no-progress",
            ] + keys.arguments(for: "coordinator"),
            name: "submit",
            launcher: hosts.launcher("coord")
        )
        #expect(await submit.waitForExit(timeout: .seconds(60)) == 0, "\(submit.stderr.suffix(1500))")
        let expected = names.map { name in
            let text = String(repeating: "log line \(name.dropFirst(5).dropLast(4))\n", count: 500)
            return "\(CacheKey(bytes: SHA256.hash(Array(text.utf8))).description)  \(name)\n"
        }
        #expect(submit.stdout == expected.joined(), "\(submit.stdout)")
        let hostsUsed = Set(
            try String(contentsOfFile: joblog, encoding: .utf8).split(separator: "\n").dropFirst().map {
                String($0.split(separator: "\t")[1])
            }
        )
        #expect(hostsUsed == ["w1", "w2"], "\(hostsUsed)")
        for process in workers { _ = await process.stop() }
        _ = await broker.stop()
    }
}
