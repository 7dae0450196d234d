import Testing

@testable import SkyNetCore

/// The journal's layout in etcd, against a model of etcd's store (revisions as etcd counts them):
/// what a new leader reads back is what the file journal's replay gives.
@Suite("etcd journal layout")
struct EtcdJournalLayoutTests {
    let layout = EtcdJournalLayout(cluster: "test")
    let envelope = TaskEnvelope(kind: "sector", priority: 0, maxAttempts: 3)
    let coordinator = PeerID(Array("c-1".utf8))

    /// etcd's keyspace: each transaction one revision; a key's create revision kept while it lives.
    struct Store {
        var values: [[UInt8]: EtcdAPI.KeyValue] = [:]
        var revision: Int64 = 1

        mutating func apply(_ operations: [EtcdAPI.Operation]) {
            self.revision += 1
            for operation in operations {
                switch operation {
                case .put(let key, let value, _):
                    let created = self.values[key]?.createRevision ?? self.revision
                    self.values[key] = EtcdAPI.KeyValue(
                        key: key,
                        value: value,
                        createRevision: created,
                        modRevision: self.revision
                    )
                case .deleteRange(let key, _):
                    self.values[key] = nil
                case .range:
                    break
                }
            }
        }
    }

    func summary(_ recovery: JournalRecovery, pendingSorted: Bool = false) -> String {
        let tasks = pendingSorted ? recovery.pending.sorted { $0.id < $1.id } : recovery.pending
        let pending = tasks.map { "\($0.id):\($0.attempt)" }.joined(separator: ",")
        let results = recovery.results.keys.sorted().map { "\($0)" }.joined(separator: ",")
        return
            "pending[\(pending)] results[\(results)] owners\(recovery.jobOwners.sorted { $0.key < $1.key }.map(\.value)) names\(recovery.jobNames.sorted { $0.key < $1.key }.map(\.value))"
    }

    @Test("what the keys hold replays as the file journal's records do, in one transaction or one per record")
    func roundTrip() {
        let ids = (0..<6).map { _ in TaskID.random() }
        let job = TaskID.random()
        let records: [JournalRecord] = [
            .submit(ids[0], coordinator: self.coordinator, attempt: 1, self.envelope, input: [1]),
            .submit(ids[1], coordinator: self.coordinator, attempt: 1, self.envelope, input: [2]),
            .submit(ids[2], coordinator: self.coordinator, attempt: 1, self.envelope, input: [3]),
            .attempt(ids[1], 2),
            .result(ids[0], coordinator: self.coordinator, frames: [[9], [8]]),
            .submit(ids[3], coordinator: .job(job), attempt: 1, self.envelope, input: [4]),
            .jobOwner(job: job, key: "KEY"),
            .jobName(job: job, name: "nightly"),
            .forget(ids[2]),
            .submit(ids[4], coordinator: self.coordinator, attempt: 1, self.envelope, input: [5]),
            .submit(ids[1], coordinator: self.coordinator, attempt: 3, self.envelope, input: [2]),
            .result(ids[5], coordinator: self.coordinator, frames: [[7]]),
            .forget(ids[5]),
        ]
        var one = Store()
        for transaction in self.layout.transactions(for: records, firstSeq: 1) { one.apply(transaction.operations) }
        let inOne = self.layout.recovery(from: Array(one.values.values))
        #expect(
            self.summary(inOne, pendingSorted: true)
                == self.summary(JournalRecovery.replay(records), pendingSorted: true)
        )
        #expect(inOne.pending.map(\.id) == [ids[3], ids[4], ids[1]], "in the order last written")
        var each = Store()
        for (offset, record) in records.enumerated() {
            each.apply(self.layout.operations(for: record, seq: UInt64(offset + 1)))
        }
        let recovered = self.layout.recovery(from: Array(each.values.values))
        // Keys order by their last write (term, then sequence number): ids[1], written again in a
        // later transaction, comes last, where the file journal keeps it first. The broker never
        // writes a pending task again (it journals a task's first SUBMIT only), so the two agree
        // on what it writes; what matters here is the same tasks, attempts and results.
        #expect(
            self.summary(recovered, pendingSorted: true)
                == self.summary(JournalRecovery.replay(records), pendingSorted: true)
        )
        #expect(recovered.pending.map(\.id) == [ids[3], ids[4], ids[1]], "in the order last written")
        #expect(recovered.pending.first { $0.id == ids[1] }?.attempt == 3)
    }

    @Test("transactions stay under etcd's operation and size limits, a record's operations together")
    func limits() {
        let big = [UInt8](repeating: 7, count: 300_000)
        // Results: one operation each (the task's key holds its result).
        let records =
            (0..<100).map { _ in
                JournalRecord.result(TaskID.random(), coordinator: self.coordinator, frames: [[1]])
            }
            + (0..<0).map { _ in
                JournalRecord.submit(
                    TaskID.random(),
                    coordinator: self.coordinator,
                    attempt: 1,
                    self.envelope,
                    input: [1]
                )
            }
            + (0..<5).map { _ in
                JournalRecord.submit(
                    TaskID.random(),
                    coordinator: self.coordinator,
                    attempt: 1,
                    self.envelope,
                    input: big
                )
            }
        let groups = self.layout.transactions(for: records, firstSeq: 1)
        #expect(groups.reduce(0) { $0 + $1.operations.count } == 100 + 5)
        for group in groups {
            #expect(group.operations.count < EtcdJournalLayout.maxOperations)
            #expect(Set(group.operations.map { "\($0)" }).count == group.operations.count)
        }
        #expect(groups.count >= 2, "\(groups.map(\.operations.count))")
        #expect(groups.last?.lastSeq == 105)
        // A key written twice in one transaction: one operation, its last state.
        let id = TaskID.random()
        let twice = self.layout.transactions(
            for: [
                .submit(id, coordinator: self.coordinator, attempt: 1, self.envelope, input: [1]),
                .forget(id),
            ],
            firstSeq: 1
        )
        #expect(twice.count == 1 && twice[0].operations.count == 1)
        #expect(twice[0].operations.allSatisfy { if case .deleteRange = $0 { true } else { false } })
    }

    @Test("a value that does not check is left out and counted")
    func corrupt() {
        let id = TaskID.random()
        var value = EtcdJournalLayout.value(
            .submit(id, coordinator: self.coordinator, attempt: 1, self.envelope, input: [1]),
            seq: 1
        )
        value[value.count - 1] ^= 0xFF
        let recovery = self.layout.recovery(from: [
            EtcdAPI.KeyValue(key: [1], value: value, createRevision: 2, modRevision: 2)
        ])
        #expect(recovery.pending.isEmpty && recovery.droppedBytes == value.count)
    }
}
