import Foundation
import Glibc
import SkyNet
import SkyNetCLI
import Synchronization
import Testing

/// Real etcd members (Debian's `etcd-server`) on loopback, each with its own data directory and
/// ports, started and stopped by PID (the bench's too).
typealias EtcdMembers = LocalEtcd

extension EndToEndTests {
    @Suite(
        "etcd: the client of its JSON gateway, against real members",
        .enabled(
            if: EtcdMembers.available || ProcessInfo.processInfo.environment["CI"] == "true",
            "etcd-server is missing (apt-get install etcd-server; .ci/run installs it, and CI requires it)"
        )
    )
    struct Etcd {
        let key = Array("skynet/test/a".utf8)

        @Test("put, range by key and by prefix, delete; a transaction's compare decides; leases keep keys alive")
        func keyValueAndLeases() async throws {
            let etcd = try await EtcdMembers(count: 1)
            let client = try EtcdClient(endpoints: etcd.endpoints)
            try client.put(EtcdAPI.PutRequest(key: self.key, value: [0, 1, 255]))
            try client.put(EtcdAPI.PutRequest(key: Array("skynet/test/b".utf8), value: Array("b".utf8)))
            let one = try client.range(EtcdAPI.RangeRequest(key: self.key))
            #expect(one.kvs.map(\.value) == [[0, 1, 255]] && one.count == 1)
            let prefix = Array("skynet/test/".utf8)
            let all = try client.range(EtcdAPI.RangeRequest(key: prefix, rangeEnd: EtcdAPI.prefixEnd(prefix)))
            #expect(all.kvs.map { String(decoding: $0.key, as: UTF8.self) } == ["skynet/test/a", "skynet/test/b"])
            // A transaction fenced on a key's creation: it succeeds once, then its compare fails.
            let leader = Array("skynet/test/leader".utf8)
            let take = EtcdAPI.TxnRequest(
                compare: [.createRevision(key: leader, equals: 0)],
                success: [.put(key: leader, value: Array("me".utf8), lease: nil)],
                failure: [.range(key: leader, rangeEnd: nil)]
            )
            let first = try client.txn(take)
            #expect(first.succeeded)
            let second = try client.txn(take)
            #expect(!second.succeeded && second.ranges.first?.kvs.first?.value == Array("me".utf8))
            // A key on a lease lives while the lease does.
            let lease = try client.grantLease(ttlSeconds: 5)
            #expect(lease.id != 0 && lease.ttlSeconds == 5)
            let leased = Array("skynet/test/leased".utf8)
            try client.put(EtcdAPI.PutRequest(key: leased, value: [1], lease: lease.id))
            #expect(try client.keepAlive(lease: lease.id) == 5)
            #expect(try client.range(EtcdAPI.RangeRequest(key: leased)).kvs.first?.lease == lease.id)
            try client.revokeLease(lease.id)
            #expect(try client.range(EtcdAPI.RangeRequest(key: leased)).kvs.isEmpty, "gone with its lease")
            #expect(try client.keepAlive(lease: lease.id) <= 0, "a revoked lease cannot be kept alive")
            try client.deleteRange(EtcdAPI.DeleteRangeRequest(key: prefix, rangeEnd: EtcdAPI.prefixEnd(prefix)))
            #expect(try client.range(EtcdAPI.RangeRequest(key: prefix, rangeEnd: EtcdAPI.prefixEnd(prefix))).count == 0)
            await etcd.stop()
        }

        @Test("three members: kill -9 the one the client talks to, and the next call goes to another")
        func memberLost() async throws {
            let etcd = try await EtcdMembers(count: 3)
            let client = try EtcdClient(endpoints: etcd.endpoints, timeout: .seconds(2))
            try client.put(EtcdAPI.PutRequest(key: self.key, value: [7]))
            await etcd.kill(0)
            // The two left are a majority: after at most an election, writes go on.
            let deadline = ContinuousClock.now + .seconds(10)
            var written = false
            while !written, ContinuousClock.now < deadline {
                do throws(EtcdError) {
                    try client.put(EtcdAPI.PutRequest(key: self.key, value: [8]))
                    written = true
                } catch {
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            #expect(written, "\(etcd.logs)")
            #expect(try client.range(EtcdAPI.RangeRequest(key: self.key)).kvs.first?.value == [8])
            await etcd.stop()
        }

        @Test(
            "election: one of two members leads; paused, it stops acting before the other takes over, and its fenced writes fail"
        )
        func election() async throws {
            let etcd = try await EtcdMembers(count: 3)
            let key = Array("skynet/test-cluster/leader".utf8)
            var a = Leadership(
                me: .init(member: "a", frontend: "tcp://a:5555", backend: "tcp://a:5556"),
                ttl: .seconds(2)
            )
            var b = Leadership(
                me: .init(member: "b", frontend: "tcp://b:5555", backend: "tcp://b:5556"),
                ttl: .seconds(2)
            )
            let clientA = try EtcdClient(endpoints: etcd.endpoints, timeout: .milliseconds(500))
            let clientB = try EtcdClient(endpoints: Array(etcd.endpoints.reversed()), timeout: .milliseconds(500))
            // Both run until one leads and the other knows it.
            let deadline = ContinuousClock.now + .seconds(5)
            while ContinuousClock.now < deadline {
                LeadershipRunner.step(&a, key: key, client: clientA)
                LeadershipRunner.step(&b, key: key, client: clientB)
                if a.isLeader != b.isLeader, case .standby(let leader?) = (a.isLeader ? b : a).role,
                    leader.member == (a.isLeader ? "a" : "b")
                {
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(a.isLeader != b.isLeader, "exactly one leads: a \(a.role), b \(b.role)")
            // Let the leader be `a` (swap names if b won).
            if b.isLeader { swap(&a, &b) }
            let (leaderClient, standbyClient) = a.me.member == "a" ? (clientA, clientB) : (clientB, clientA)
            guard case .leader(let term) = a.role else { return }
            // The leader is paused (not stepped): the standby takes over once its lease expires.
            let paused = ContinuousClock.now
            var tookOver: ContinuousClock.Instant?
            while ContinuousClock.now < paused + .seconds(8) {
                LeadershipRunner.step(&b, key: key, client: standbyClient)
                if b.isLeader {
                    tookOver = ContinuousClock.now
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            let took = try #require(tookOver, "the standby never took over")
            #expect(!a.mayAct(now: took), "the paused leader's time was up before the other took over")
            #expect(took - paused < .seconds(4), "takeover after \(took - paused) (TTL 2 s + a renewal period)")
            // Whatever it believes, the old leader's writes are fenced off by etcd.
            let fenced = try leaderClient.txn(
                EtcdAPI.TxnRequest(
                    compare: [.createRevision(key: key, equals: term.fence)],
                    success: [.put(key: Array("skynet/test-cluster/task".utf8), value: [1], lease: nil)]
                )
            )
            #expect(!fenced.succeeded)
            // Resumed, it steps down at once and learns who leads.
            #expect(a.next(now: .now) == .grantLease && !a.isLeader)
            for _ in 0..<3 { LeadershipRunner.step(&a, key: key, client: leaderClient) }
            #expect(a.role == .standby(leader: b.me), "\(a.role)")
            await etcd.stop()
        }

        @Test("the journal's layout in real etcd: fenced transactions in, one range out, as the file journal replays")
        func journalLayout() async throws {
            let etcd = try await EtcdMembers(count: 1)
            let client = try EtcdClient(endpoints: etcd.endpoints)
            let layout = EtcdJournalLayout(cluster: "layout-test")
            let created = try client.txn(
                EtcdAPI.TxnRequest(
                    compare: [.createRevision(key: layout.leaderKey, equals: 0)],
                    success: [.put(key: layout.leaderKey, value: [1], lease: nil)]
                )
            )
            let fence = created.header.revision
            let envelope = TaskEnvelope(kind: "sector", priority: 0, maxAttempts: 3)
            let coordinator = PeerID(Array("c-1".utf8))
            let ids = (0..<300).map { _ in TaskID.random() }
            var records: [JournalRecord] = ids.map {
                .submit($0, coordinator: coordinator, attempt: 1, envelope, input: [UInt8](repeating: 5, count: 4000))
            }
            records += ids[0..<100].map { .result($0, coordinator: coordinator, frames: [[1], [2]]) }
            records += ids[100..<150].map { .forget($0) }
            records += ids[150..<160].map { .attempt($0, 2) }
            let transactions = layout.transactions(for: records, firstSeq: 1)
            #expect(transactions.count > 1, "split by etcd's limits")
            for transaction in transactions {
                let reply = try client.txn(
                    EtcdAPI.TxnRequest(
                        compare: [.createRevision(key: layout.leaderKey, equals: fence)],
                        success: transaction.operations
                    )
                )
                #expect(reply.succeeded)
            }
            let range = layout.journalRange
            let stored = try client.range(EtcdAPI.RangeRequest(key: range.key, rangeEnd: range.end))
            let recovery = layout.recovery(from: stored.kvs)
            let expected = JournalRecovery.replay(records)
            #expect(recovery.pending.map(\.id) == expected.pending.map(\.id))
            #expect(recovery.pending.map(\.attempt) == expected.pending.map(\.attempt))
            #expect(Set(recovery.results.keys) == Set(expected.results.keys) && recovery.droppedBytes == 0)
            await etcd.stop()
        }

        @Test(
            "the journal's writer on etcd: group commits in order, all of it read back; fenced off, it fails and commits no more"
        )
        func journalWriter() async throws {
            let etcd = try await EtcdMembers(count: 3)
            let client = try EtcdClient(endpoints: etcd.endpoints)
            let layout = EtcdJournalLayout(cluster: "writer-test")
            let fence = try client.txn(
                EtcdAPI.TxnRequest(
                    compare: [.createRevision(key: layout.leaderKey, equals: 0)],
                    success: [.put(key: layout.leaderKey, value: [1], lease: nil)]
                )
            ).header.revision
            let committed = Mutex<[UInt64]>([])
            let failures = Mutex<[EtcdError]>([])
            let journal = try EtcdJournal(
                endpoints: etcd.endpoints,
                layout: layout,
                fence: fence,
                onCommit: { seq in committed.withLock { $0.append(seq) } },
                onFailure: { error in failures.withLock { $0.append(error) } }
            )
            let envelope = TaskEnvelope(kind: "sector", priority: 0, maxAttempts: 3)
            let coordinator = PeerID(Array("c-1".utf8))
            var records: [JournalRecord] = []
            let first = TaskID.random()
            for index in 0..<2000 {
                let id = index == 0 ? first : TaskID.random()
                let record = JournalRecord.submit(id, coordinator: coordinator, attempt: 1, envelope, input: [1, 2, 3])
                records.append(record)
                #expect(journal.append(record) == UInt64(records.count))
            }
            #expect(journal.close() == nil)
            let seqs = committed.withLock { $0 }
            #expect(seqs.last == 2000 && seqs == seqs.sorted(), "\(seqs.count) commits")
            #expect(seqs.count < 2000, "grouped: \(seqs.count) transactions for 2,000 records")
            let range = layout.journalRange
            let stored = try client.range(EtcdAPI.RangeRequest(key: range.key, rangeEnd: range.end))
            #expect(
                layout.recovery(from: stored.kvs).pending.map(\.id) == JournalRecovery.replay(records).pending.map(\.id)
            )
            // Another member takes the lead (the key is deleted and made again: a new fence).
            try client.deleteRange(EtcdAPI.DeleteRangeRequest(key: layout.leaderKey))
            try client.put(EtcdAPI.PutRequest(key: layout.leaderKey, value: [2]))
            let deposed = try EtcdJournal(
                endpoints: etcd.endpoints,
                layout: layout,
                fence: fence,
                onCommit: { seq in committed.withLock { $0.append(seq + 1_000_000) } },
                onFailure: { error in failures.withLock { $0.append(error) } }
            )
            deposed.append(.forget(first))
            let failure = deposed.close()
            #expect(failure?.code == .refused && failures.withLock { $0.count } == 1, "\(String(describing: failure))")
            #expect(committed.withLock { $0.last } == 2000, "nothing committed after the fence moved")
            #expect(try client.range(EtcdAPI.RangeRequest(key: range.key, rangeEnd: range.end)).count == 2000)
            await etcd.stop()
        }

        @Test("an unreachable member is an error within the timeout; a bad endpoint says what is wrong")
        func errors() async throws {
            let nowhere = try EtcdMembers.freePorts(1)[0]
            let client = try EtcdClient(endpoints: ["http://127.0.0.1:\(nowhere)"], timeout: .milliseconds(500))
            let started = ContinuousClock.now
            #expect(throws: EtcdError.self) { try client.range(EtcdAPI.RangeRequest(key: self.key)) }
            #expect(ContinuousClock.now - started < .seconds(3))
            for bad in ["127.0.0.1:2379", "ftp://127.0.0.1:2379", "http://127.0.0.1", "http://:2379"] {
                do {
                    _ = try EtcdClient(endpoints: [bad])
                    Issue.record("\(bad) was taken")
                } catch {
                    #expect(error.code == .badEndpoint && error.message.contains(bad), "\(error)")
                }
            }
            #expect(throws: EtcdError.self) {
                try EtcdClient(endpoints: ["http://127.0.0.1:1", "https://127.0.0.1:2"])
            }
        }

        @Test(
            "HA on loopback: a detached job outlives its leader (kill -9); `results --follow` given both members gets every result from the new one"
        )
        func detachedJobAcrossFailover() async throws {
            let etcd = try await EtcdMembers(count: 1)
            let ports = try LocalEtcd.freePorts(4)
            let frontends = [ports[0], ports[2]].map { "tcp://127.0.0.1:\($0)" }
            let backends = [ports[1], ports[3]].map { "tcp://127.0.0.1:\($0)" }
            func broker(_ index: Int) throws -> Spawned {
                try Spawned(
                    [
                        "broker", "--etcd", etcd.endpoints[0], "--frontend", frontends[index], "--backend",
                        backends[index],
                    ],
                    name: "ha-broker-\(index)"
                )
            }
            let first = try broker(0)
            defer { first.signal(SIGKILL) }
            #expect(
                await first.waitForStderr(timeout: .seconds(15)) { $0.contains("leading: serving") },
                "\(first.stderr)"
            )
            let second = try broker(1)
            defer { second.signal(SIGKILL) }
            #expect(await second.waitForStderr(timeout: .seconds(15)) { $0.contains("standing by") })
            let group = frontends.joined(separator: ",")
            let submit = try Spawned(
                ["submit", "--broker", group, "--sectors", "30", "--work", "50ms", "--detach"],
                name: "detach"
            )
            #expect(await submit.waitForExit(timeout: .seconds(20)) == 0, "\(submit.stderr)")
            let job = submit.stdout.split(separator: "\n").last.map(String.init) ?? ""
            // The leader goes before any worker came: every task is only in etcd.
            first.signal(SIGKILL)
            let worker = try Spawned(["worker", "--broker", backends.joined(separator: ",")], name: "ha-worker")
            defer { worker.signal(SIGKILL) }
            let results = try Spawned(["results", job, "--broker", group, "--follow", "--json"], name: "results")
            #expect(
                await results.waitForExit(timeout: .seconds(60)) == 0,
                "\(results.stderr)\n\(second.stderr.suffix(800))"
            )
            let finals = results.stdout.split(separator: "\n").filter { $0.contains("\"status\":\"completed\"") }
            #expect(finals.count == 30, "\(results.stdout.suffix(600))")
            await etcd.stop()
        }

        @Test(
            "TLS: etcd on https:// with client certificates; a broker joins with --etcd-ca/--etcd-cert/--etcd-key and leads; a wrong CA or no client certificate is refused, saying why"
        )
        func tls() async throws {
            let certificates = try TestCertificates()
            let clientTLS = EtcdTLS(
                caFile: certificates.path("ca.crt"),
                certificateFile: certificates.path("client.crt"),
                keyFile: certificates.path("client.key")
            )
            let etcd = try await EtcdMembers(
                count: 1,
                tls: LocalEtcd.ServerTLS(
                    certificate: certificates.path("server.crt"),
                    key: certificates.path("server.key"),
                    clientCA: certificates.path("ca.crt")
                ),
                clientTLS: clientTLS
            )
            #expect(etcd.endpoints[0].hasPrefix("https://"))
            let client = try EtcdClient(endpoints: etcd.endpoints, timeout: .seconds(2), tls: clientTLS)
            try client.put(EtcdAPI.PutRequest(key: self.key, value: [1, 2, 3]))
            #expect(try client.range(EtcdAPI.RangeRequest(key: self.key)).kvs.first?.value == [1, 2, 3])
            client.close()

            // No client certificate: etcd refuses the handshake. Another CA: etcd's is not trusted.
            let anonymous = try EtcdClient(
                endpoints: etcd.endpoints,
                timeout: .seconds(2),
                tls: EtcdTLS(caFile: certificates.path("ca.crt"))
            )
            #expect(throws: EtcdError.self) { try anonymous.range(EtcdAPI.RangeRequest(key: self.key)) }
            let stranger = try EtcdClient(
                endpoints: etcd.endpoints,
                timeout: .seconds(2),
                tls: EtcdTLS(
                    caFile: certificates.path("other-ca.crt"),
                    certificateFile: certificates.path("client.crt"),
                    keyFile: certificates.path("client.key")
                )
            )
            do {
                _ = try stranger.range(EtcdAPI.RangeRequest(key: self.key))
                Issue.record("a server signed by another CA was trusted")
            } catch {
                #expect(error.message.contains("not trusted"), "\(error)")
            }

            // A broker on it, from the command line.
            // Four ports found free: the refused broker's two as well (they were the first two plus 7,
            // which another test's process once held: "Address already in use" instead of the etcd error).
            let ports = try LocalEtcd.freePorts(4)
            let broker = try Spawned(
                [
                    "broker", "--etcd", etcd.endpoints[0], "--etcd-ca", certificates.path("ca.crt"), "--etcd-cert",
                    certificates.path("client.crt"), "--etcd-key", certificates.path("client.key"), "--frontend",
                    "tcp://127.0.0.1:\(ports[0])", "--backend", "tcp://127.0.0.1:\(ports[1])",
                ],
                name: "broker-tls"
            )
            defer { broker.signal(SIGKILL) }
            #expect(
                await broker.waitForStderr(timeout: .seconds(15)) { $0.contains("leading: serving") },
                "\(broker.stderr.suffix(1500))"
            )
            // Without its client certificate, the broker says so at once and exits.
            let refused = try Spawned(
                [
                    "broker", "--etcd", etcd.endpoints[0], "--etcd-ca", certificates.path("ca.crt"), "--frontend",
                    "tcp://127.0.0.1:\(ports[2])", "--backend", "tcp://127.0.0.1:\(ports[3])",
                ],
                name: "broker-no-cert"
            )
            #expect(await refused.waitForExit(timeout: .seconds(10)) != 0)
            #expect(refused.stderr.contains("cannot reach etcd"), "\(refused.stderr)")
            broker.signal(SIGKILL)
            await etcd.stop()
        }
    }
}

/// A CA, etcd's server certificate (for 127.0.0.1) and a client certificate, made with the
/// `openssl` command in a fresh directory; and another CA that signed none of them.
final class TestCertificates {
    let directory: URL

    init() throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-tls-\(UUID())")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        let openssl = "/usr/bin/openssl"
        let dir = self.directory.path
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\n".write(
            toFile: "\(dir)/server.ext",
            atomically: true,
            encoding: .utf8
        )
        for ca in ["ca", "other-ca"] {
            try runCommand(
                openssl,
                [
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(dir)/\(ca).key", "-out",
                    "\(dir)/\(ca).crt", "-days", "1", "-subj", "/CN=skynet-test-\(ca)",
                ]
            )
        }
        for (name, extensions) in [("server", true), ("client", false)] {
            try runCommand(
                openssl,
                [
                    "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(dir)/\(name).key", "-out",
                    "\(dir)/\(name).csr",
                    "-subj", "/CN=skynet-test-\(name)",
                ]
            )
            try runCommand(
                openssl,
                [
                    "x509", "-req", "-in", "\(dir)/\(name).csr", "-CA", "\(dir)/ca.crt", "-CAkey", "\(dir)/ca.key",
                    "-CAcreateserial", "-out", "\(dir)/\(name).crt", "-days", "1",
                ] + (extensions ? ["-extfile", "\(dir)/server.ext"] : [])
            )
        }
    }

    func path(_ name: String) -> String { self.directory.appendingPathComponent(name).path }

    deinit { try? FileManager.default.removeItem(at: self.directory) }
}
