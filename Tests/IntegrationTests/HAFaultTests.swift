import Foundation
import SkyNet
import SkyNetCLI
import Synchronization
import Testing

/// Root, `ip` and etcd are there (under CI etcd must be: `.ci/run` installs it).
let haFaultTestsEnabled =
    VirtualHosts.available && (EtcdMembers.available || ProcessInfo.processInfo.environment["CI"] == "true")

/// HA mode under faults, in the style of Jepsen (issue 27): three etcd members, two brokers, two
/// workers and a coordinator, each on a host of its own (a network namespace on one bridge). The
/// coordinator keeps submitting (a command per line of a FIFO the test feeds) while a fault hits
/// the leader or etcd; a checker then reads the coordinator's trace (each task's SUBMIT, ACCEPTED and
/// RESULTs, with the broker in use) and its final results, and asserts that nothing acknowledged was
/// lost, nothing unexpected appeared, and each task has exactly one final result. It reports the
/// failover time: from the fault to the first result through the new leader (for an etcd member's
/// loss, where the leader stays, the longest time without a result after it).
// In the serialized end-to-end suite: these hosts, etcd members and brokers need the machine to
// themselves (timing tests beside them would be starved).
extension EndToEndTests {
    @Suite("HA on etcd: faults in network namespaces", .serialized, .enabled(if: haFaultTestsEnabled))
    struct HAFaultTests {
        enum Fault: String, CaseIterable, Sendable, CustomTestStringConvertible {
            case killLeader = "kill -9 the leader broker"
            case cutLeaderLink = "cut the leader's link for 15 s"
            case pauseLeader = "SIGSTOP the leader past its lease"
            case killEtcdMember = "kill -9 an etcd member and restart it"

            var testDescription: String { self.rawValue }
        }

        /// The checker's verdict on one run.
        struct Verdict: CustomStringConvertible {
            var fed = 0
            var submitted = 0
            var acknowledged = 0
            var finals = 0
            var lost: [String] = []
            var unexpected: [String] = []
            var duplicateFinals: [String] = []
            var notCompleted: [String] = []
            var failover: Double?

            var description: String {
                "fed \(self.fed), submitted \(self.submitted), acknowledged \(self.acknowledged), final \(self.finals); "
                    + "lost \(self.lost.count), unexpected \(self.unexpected.count), "
                    + "more than one final \(self.duplicateFinals.count), not completed \(self.notCompleted.count); "
                    + "failover \(self.failover.map { String(format: "%.2f s", $0) } ?? "none")"
            }
        }

        /// The faults to run: all, or those `SKYNET_HA_FAULTS` names (`killLeader,pauseLeader`).
        static var faults: [Fault] {
            guard let names = ProcessInfo.processInfo.environment["SKYNET_HA_FAULTS"], !names.isEmpty else {
                return Fault.allCases
            }
            let wanted = Set(names.split(separator: ",").map(String.init))
            return Fault.allCases.filter { wanted.contains("\($0)") }
        }

        @Test(arguments: Self.faults)
        func survives(_ fault: Fault) async throws {
            let hosts = try VirtualHosts([
                ("e1", 21), ("e2", 22), ("e3", 23), ("b1", 11), ("b2", 12), ("w1", 31), ("w2", 32), ("c", 41),
            ])
            let address = { (host: String) in hosts.addresses[host]! }
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-ha-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }

            // etcd: one member a host.
            let members = ["e1", "e2", "e3"]
            let cluster = members.map { "\($0)=http://\(address($0)):2380" }.joined(separator: ",")
            var etcd: [String: ChildProcess] = [:]
            func startEtcd(_ member: String) throws {
                etcd[member] = try ChildProcess(
                    executable: EtcdMembers.binary,
                    [
                        "--name", member, "--data-dir", directory.appendingPathComponent(member).path,
                        "--listen-client-urls", "http://\(address(member)):2379",
                        "--advertise-client-urls", "http://\(address(member)):2379",
                        "--listen-peer-urls", "http://\(address(member)):2380",
                        "--initial-advertise-peer-urls", "http://\(address(member)):2380",
                        "--initial-cluster", cluster, "--initial-cluster-token", directory.lastPathComponent,
                        "--log-level", "warn",
                    ],
                    name: "etcd-\(member)",
                    directory: directory,
                    launcher: hosts.launcher(member)
                )
            }
            for member in members { try startEtcd(member) }
            let etcdURLs = members.map { "http://\(address($0)):2379" }.joined(separator: ",")

            var processes: [ChildProcess] = []
            defer {
                for process in processes + Array(etcd.values) where process.isRunning { process.signal(SIGKILL) }
            }
            let frontends = ["b1", "b2"].map { "tcp://\(address($0)):5555" }
            let backends = ["b1", "b2"].map { "tcp://\(address($0)):5556" }
            /// A broker; it fails fast while etcd is not up yet, so it is started again until it listens.
            func startBroker(_ host: String) async throws -> ChildProcess {
                let deadline = ContinuousClock.now + .seconds(30)
                while true {
                    let broker = try ChildProcess(
                        [
                            "broker", "--etcd", etcdURLs, "--frontend", "tcp://\(address(host)):5555", "--backend",
                            "tcp://\(address(host)):5556", "--insecure",
                        ],
                        name: host,
                        launcher: hosts.launcher(host)
                    )
                    if await broker.listeningEndpoints(timeout: .seconds(5)) != nil { return broker }
                    broker.signal(SIGKILL)
                    guard ContinuousClock.now < deadline else {
                        throw TestFailure("broker \(host) did not start: \(broker.stderr.suffix(600))")
                    }
                    try await Task.sleep(for: .milliseconds(500))
                }
            }
            /// Which member etcd's Raft leader is (asked with `etcdctl` from the coordinator's host).
            func etcdLeader() -> String? {
                guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcdctl"),
                    let text = try? runCommand(
                        hosts.launcher("c")[0],
                        Array(hosts.launcher("c").dropFirst()) + [
                            "/usr/bin/etcdctl", "--endpoints", etcdURLs, "endpoint", "status", "-w", "json",
                        ]
                    ),
                    let statuses = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]]
                else { return nil }
                for status in statuses {
                    guard let endpoint = status["Endpoint"] as? String, let inner = status["Status"] as? [String: Any],
                        let header = inner["header"] as? [String: Any],
                        let member = (header["member_id"] as? NSNumber)?.uint64Value,
                        let leader = (inner["leader"] as? NSNumber)?.uint64Value, member == leader
                    else { continue }
                    return members.first { endpoint.contains(address($0)) }
                }
                return nil
            }
            /// The role a member reports in its STATUS (asked from the coordinator's host).
            func role(_ frontend: String) async -> String? {
                guard
                    let process = try? ChildProcess(
                        ["status", "--broker", frontend, "--json", "--timeout", "2s"],
                        name: "status",
                        launcher: hosts.launcher("c")
                    ), await process.waitForExit(timeout: .seconds(5)) == 0,
                    let status = try? BrokerStatus.parse(process.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
                else { return nil }
                return status.role
            }
            func waitForRole(_ frontend: String, _ wanted: String, timeout: Duration) async throws {
                let deadline = ContinuousClock.now + timeout
                while await role(frontend) != wanted {
                    guard ContinuousClock.now < deadline else { throw TestFailure("\(frontend) is not \(wanted)") }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }

            let b1 = try await startBroker("b1")
            processes.append(b1)
            try await waitForRole(frontends[0], "leader", timeout: .seconds(20))
            let b2 = try await startBroker("b2")
            processes.append(b2)
            try await waitForRole(frontends[1], "standby", timeout: .seconds(10))
            for host in ["w1", "w2"] {
                processes.append(
                    try ChildProcess(
                        [
                            "worker", "--broker", backends.joined(separator: ","), "--name", host, "--slots", "4",
                            "--allow-command", "/bin/sh", "--insecure",
                        ] + EndToEndTests.runAs,
                        name: host,
                        launcher: hosts.launcher(host)
                    )
                )
            }

            // The coordinator reads its lines from a FIFO the test feeds: it is still submitting when the
            // fault comes and while the group fails over.
            let fifo = directory.appendingPathComponent("lines").path
            guard mkfifo(fifo, 0o644) == 0 else { throw TestFailure("mkfifo failed") }
            let trace = directory.appendingPathComponent("trace.jsonl").path
            let submit = try ChildProcess(
                [
                    "submit", "--broker", frontends.joined(separator: ","), "--exec", "sh -c 'sleep 0.2; echo $1' _ {}",
                    "--inputs", fifo, "--json", "--trace", trace, "--no-progress",
                ],
                name: "submit",
                launcher: hosts.launcher("c")
            )
            processes.append(submit)
            let lines = 600
            let feeder = Feeder(path: fifo, lines: lines, perSecond: 20)
            feeder.start()

            // The fault, 6 s into the feed (30 s long).
            try await Task.sleep(for: .seconds(6))
            let faultAt = Date().timeIntervalSince1970
            switch fault {
            case .killLeader:
                b1.signal(SIGKILL)
            case .cutLeaderLink:
                try hosts.setLink("b1", up: false)
                try await Task.sleep(for: .seconds(15))
                try hosts.setLink("b1", up: true)
            case .pauseLeader:
                b1.signal(SIGSTOP)
                try await Task.sleep(for: .seconds(9))
                b1.signal(SIGCONT)
            case .killEtcdMember:
                // etcd's own leader, the hardest to lose (an election follows); e1 if it cannot be told.
                let victim = etcdLeader() ?? "e1"
                print("HA fault: killing etcd member \(victim)")
                etcd[victim]?.signal(SIGKILL)
                try await Task.sleep(for: .seconds(8))
                try startEtcd(victim)
            }
            if fault != .killEtcdMember {
                // The other member leads; the old leader, when it is back, stands by.
                try await waitForRole(frontends[1], "leader", timeout: .seconds(20))
                if fault != .killLeader { try await waitForRole(frontends[0], "standby", timeout: .seconds(20)) }
            }

            let exit = await submit.waitForExit(timeout: .seconds(120))
            feeder.finish()
            let verdict = Self.check(
                trace: (try? String(contentsOfFile: trace, encoding: .utf8)) ?? "",
                finals: submit.stdout,
                fed: lines,
                faultAt: faultAt,
                newLeader: fault == .killEtcdMember ? nil : frontends[1]
            )
            print("HA fault \"\(fault.rawValue)\": \(verdict)")
            if let keep = ProcessInfo.processInfo.environment["SKYNET_HA_LOGS"] {
                for process in processes {
                    try? (process.stderr).write(
                        toFile: "\(keep)/\(fault)-\(process.name).log",
                        atomically: true,
                        encoding: .utf8
                    )
                }
                try? FileManager.default.copyItem(atPath: trace, toPath: "\(keep)/\(fault)-trace.jsonl")
            }
            let logs =
                "submit: \(submit.stderr.suffix(1500))\nb1: \(b1.stderr.suffix(1500))\nb2: \(b2.stderr.suffix(1500))"
            #expect(exit == 0, "\(logs)")
            #expect(verdict.submitted == lines, "\(verdict)")
            #expect(verdict.finals == lines, "\(verdict)\n\(logs)")
            #expect(verdict.lost.isEmpty, "acknowledged, never completed: \(verdict.lost.prefix(5))")
            #expect(verdict.unexpected.isEmpty, "unexpected: \(verdict.unexpected.prefix(5))")
            #expect(verdict.duplicateFinals.isEmpty, "more than one final: \(verdict.duplicateFinals.prefix(5))")
            #expect(verdict.notCompleted.isEmpty, "not completed: \(verdict.notCompleted.prefix(5))\n\(logs)")
            #expect((verdict.failover ?? .infinity) <= 10, "failover took too long: \(verdict)\n\(logs)")
        }

        /// The checker: the trace (submitted, accepted, results) against the final results printed.
        /// - Parameters:
        ///   - newLeader: the broker that leads after the fault (its frontend): the failover is the
        ///     fault to the first result through it. Nil (the leader stays): the longest time without a
        ///     result in the 20 s after the fault.
        static func check(trace: String, finals: String, fed: Int, faultAt: Double, newLeader: String?) -> Verdict {
            var verdict = Verdict()
            verdict.fed = fed
            var submitted: Set<String> = []
            var acknowledged: Set<String> = []
            var resultTimes: [Double] = []
            var firstThroughNewLeader: Double?
            for line in trace.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let event = object["e"] as? String, let id = object["id"] as? String
                else { continue }
                switch event {
                case "submitted": submitted.insert(id)
                case "accepted": acknowledged.insert(id)
                case "result":
                    acknowledged.insert(id)
                    if let time = object["t"] as? Double, time > faultAt, object["s"] as? String == "completed" {
                        resultTimes.append(time)
                        if let newLeader, object["b"] as? String == newLeader {
                            firstThroughNewLeader = min(firstThroughNewLeader ?? time, time)
                        }
                    }
                default: break
                }
            }
            var finalsByID: [String: Int] = [:]
            var completed: Set<String> = []
            for line in finals.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let id = object["id"] as? String, object["seq"] != nil
                else { continue }
                finalsByID[id, default: 0] += 1
                guard submitted.contains(id) else {
                    verdict.unexpected.append(id)
                    continue
                }
                // Each command echoes its line: anything else is not what was asked.
                let command = object["command"] as? String ?? ""
                let input = command.split(separator: " ").last.map(String.init) ?? ""
                if object["status"] as? String == "completed" {
                    if object["stdout"] as? String == input + "\n" {
                        completed.insert(id)
                    } else {
                        verdict.unexpected.append(id)
                    }
                } else {
                    verdict.notCompleted.append("\(id): \(object["error"] ?? "")")
                }
            }
            verdict.submitted = submitted.count
            verdict.acknowledged = acknowledged.count
            verdict.finals = finalsByID.count
            verdict.duplicateFinals = finalsByID.filter { $0.value > 1 }.map(\.key)
            verdict.lost = acknowledged.subtracting(completed).sorted()
            if newLeader != nil {
                verdict.failover = firstThroughNewLeader.map { $0 - faultAt }
            } else {
                let window = ([faultAt] + resultTimes.sorted().filter { $0 < faultAt + 20 })
                verdict.failover = zip(window, window.dropFirst()).map { $1 - $0 }.max() ?? 20
            }
            return verdict
        }
    }
}

/// Writes `lines` lines (`t-1`, `t-2`, …) to a FIFO at a steady rate, on a thread of its own (opening
/// a FIFO blocks until its reader opens it).
final class Feeder: Sendable {
    let path: String
    let lines: Int
    let perSecond: Int
    private let stopped = Mutex(false)

    init(path: String, lines: Int, perSecond: Int) {
        self.path = path
        self.lines = lines
        self.perSecond = perSecond
    }

    func start() {
        let thread = Thread { [self] in
            let fd = open(self.path, O_WRONLY)
            guard fd >= 0 else { return }
            defer { close(fd) }
            for index in 1...self.lines {
                if self.stopped.withLock({ $0 }) { return }
                let line = Array("t-\(index)\n".utf8)
                guard write(fd, line, line.count) == line.count else { return }
                usleep(UInt32(1_000_000 / self.perSecond))
            }
        }
        thread.start()
    }

    func finish() { self.stopped.withLock { $0 = true } }
}
