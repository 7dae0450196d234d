/// How the broker's journal lives in etcd (HA mode): not a log but the state it rebuilds, one key per
/// thing kept, so that a new leader reads it with one range and nothing needs compacting but etcd's
/// own history. Pure: the records in, etcd operations out; keys and values in, a ``JournalRecovery``
/// out. The journal's writer sends the operations in transactions fenced on the leader key.
///
/// Keys, under `skynet/<cluster>/j/` (task and job ids as UUIDs):
/// - `task/<id>`: the SUBMIT record of an accepted task with no result yet, then the RESULT kept for
///   its coordinator (or a detached job);
/// - `attempt/<id>`: its attempt, when a lost worker's task was queued again after the SUBMIT;
/// - `job/<id>/owner`, `job/<id>/name`: a detached job's key and name.
///
/// Values are the term's fence (i64) and the record's sequence number in it (u64), then the record
/// as the file journal frames it (length, CRC-32, payload), so a value is checked as a file record is.
package struct EtcdJournalLayout: Sendable {
    /// The prefix of every key of one cluster: `skynet/<cluster>/`.
    package let prefix: [UInt8]

    /// etcd's default limit on a transaction's operations (`--max-txn-ops`).
    package static let maxOperations = 128
    /// The most bytes of values one transaction carries: etcd refuses requests over 1.5 MiB
    /// (`--max-request-bytes`), and base64 in JSON adds a third.
    package static let maxTransactionBytes = 1_000_000
    /// The largest record one key may hold (a task's input, a result's output): what fits one
    /// transaction alone. A larger one is refused when it is submitted.
    package static let maxRecordBytes = 900_000

    /// The term the values are written in (the leader key's create revision): it orders a value
    /// before those of later terms, whose sequence numbers start again at 1.
    package var fence: Int64 = 0

    package init(cluster: String, fence: Int64 = 0) {
        self.prefix = Array("skynet/\(cluster)/".utf8)
        self.fence = fence
    }

    /// The leader key of the cluster.
    package var leaderKey: [UInt8] { self.prefix + Array("leader".utf8) }

    /// The range of every key of the journal (the leader key is outside it).
    package var journalRange: (key: [UInt8], end: [UInt8]) {
        (self.prefix + Array("j/".utf8), EtcdAPI.prefixEnd(self.prefix + Array("j/".utf8)))
    }

    private func key(_ kind: String, _ id: TaskID, _ suffix: String = "") -> [UInt8] {
        self.prefix + Array("j/\(kind)/\(id)\(suffix)".utf8)
    }

    /// The operations that store `record` (the `seq`-th the broker appended).
    package func operations(for record: JournalRecord, seq: UInt64) -> [EtcdAPI.Operation] {
        let value = Self.value(record, seq: seq, fence: self.fence)
        switch record {
        // As few operations as a task needs (etcd's cost is per operation): one key holds a task's
        // SUBMIT and then its RESULT, so a task is three writes in all (accepted, its result, its
        // delivery). A stale `attempt` key is harmless: values replay in the order written (term,
        // then sequence number), so an older one is overwritten by what follows it; one whose task
        // is gone is deleted when a new leader reads the journal.
        case .submit(let id, _, _, _, _), .result(let id, _, _):
            return [.put(key: self.key("task", id), value: value, lease: nil)]
        case .attempt(let id, _):
            return [.put(key: self.key("attempt", id), value: value, lease: nil)]
        case .forget(let id), .delivered(let id):
            return [.deleteRange(key: self.key("task", id), rangeEnd: nil)]
        case .jobOwner(let job, _):
            return [.put(key: self.key("job", job, "/owner"), value: value, lease: nil)]
        case .jobName(let job, _):
            return [.put(key: self.key("job", job, "/name"), value: value, lease: nil)]
        }
    }

    /// A key's value: the record's sequence number (u64, the order within one transaction), then
    /// the record framed as the file journal frames it.
    static func value(_ record: JournalRecord, seq: UInt64, fence: Int64 = 0) -> [UInt8] {
        var writer = ByteWriter(capacity: 16)
        writer.u64(UInt64(bitPattern: fence))
        writer.u64(seq)
        return writer.bytes + record.framed()
    }

    /// One transaction of the journal's writer: its operations (one per key: etcd refuses two on the
    /// same key in a transaction, and only the last state of a key within it matters), and the
    /// sequence number of the last record it holds (its commit covers every record up to it).
    package struct Transaction: Sendable {
        package var operations: [EtcdAPI.Operation]
        /// The sequence numbers of the records it holds, in order.
        package var seqs: [UInt64]
        package var lastSeq: UInt64 { self.seqs.last ?? 0 }
    }

    /// Records (numbered from `firstSeq`) in transactions that each fit etcd's limits
    /// (``maxOperations`` with room for the fence, ``maxTransactionBytes``), in order; a record's
    /// operations never straddle two.
    package func transactions(for records: [JournalRecord], firstSeq: UInt64) -> [Transaction] {
        self.transactions(for: records.enumerated().map { (firstSeq + UInt64($0.offset), $0.element) })
    }

    /// The key every record of one task (or detached job) writes under: records with the same one
    /// must be committed in order, others need not (``EtcdJournal``'s lanes).
    package static func subject(of record: JournalRecord) -> TaskID {
        switch record {
        case .submit(let id, _, _, _, _), .attempt(let id, _), .result(let id, _, _), .forget(let id),
            .delivered(let id):
            id
        case .jobOwner(let job, _), .jobName(let job, _): job
        }
    }

    /// Numbered records, in order, in transactions as above.
    package func transactions(for records: [(seq: UInt64, record: JournalRecord)]) -> [Transaction] {
        var transactions: [Transaction] = []
        var byKey: [[UInt8]: Int] = [:]
        var operations: [EtcdAPI.Operation] = []
        var seqs: [UInt64] = []
        var bytes = 0
        func flush() {
            guard !operations.isEmpty else { return }
            transactions.append(Transaction(operations: operations, seqs: seqs))
            operations.removeAll()
            seqs.removeAll()
            byKey.removeAll()
            bytes = 0
        }
        for (seq, record) in records {
            let added = self.operations(for: record, seq: seq)
            let size = added.reduce(0) { $0 + Self.size(of: $1) }
            let newKeys = added.filter { byKey[Self.key(of: $0)] == nil }.count
            if operations.count + newKeys > Self.maxOperations - 1 || bytes + size > Self.maxTransactionBytes {
                flush()
            }
            for operation in added {
                let key = Self.key(of: operation)
                if let index = byKey[key] {
                    operations[index] = operation  // the key's last write in the transaction wins
                } else {
                    byKey[key] = operations.count
                    operations.append(operation)
                }
            }
            bytes += size
            seqs.append(seq)
        }
        flush()
        return transactions
    }

    private static func key(of operation: EtcdAPI.Operation) -> [UInt8] {
        switch operation {
        case .put(let key, _, _), .deleteRange(let key, _), .range(let key, _): key
        }
    }

    private static func size(of operation: EtcdAPI.Operation) -> Int {
        switch operation {
        case .put(let key, let value, _): key.count + value.count
        case .deleteRange(let key, let end), .range(let key, let end): key.count + (end?.count ?? 0)
        }
    }

    /// What the journal's keys hold, as the file journal's replay would give it. A value that does
    /// not check (its CRC, its record) is left out and counted in `droppedBytes`.
    package func recovery(from values: [EtcdAPI.KeyValue]) -> JournalRecovery {
        // Replayed in the order written, as the file journal replays its records: by term, then by
        // sequence number within it (a key holds its last write only).
        var ordered: [(fence: Int64, seq: UInt64, record: JournalRecord)] = []
        var dropped = 0
        for value in values {
            guard let (fence, seq, record) = Self.record(from: value.value) else {
                dropped += value.value.count
                continue
            }
            ordered.append((fence, seq, record))
        }
        ordered.sort { ($0.fence, $0.seq) < ($1.fence, $1.seq) }
        var recovery = JournalRecovery.replay(ordered.map(\.record))
        recovery.droppedBytes = dropped
        recovery.fileBytes = values.reduce(0) { $0 + $1.value.count }
        return recovery
    }

    /// `attempt` keys whose task is gone (a result or a forget does not delete them: see
    /// ``operations(for:seq:)``): what a new leader deletes after it has read the journal.
    package func orphanAttempts(in values: [EtcdAPI.KeyValue]) -> [[UInt8]] {
        let taskPrefix = self.prefix + Array("j/task/".utf8)
        let attemptPrefix = self.prefix + Array("j/attempt/".utf8)
        var tasks: Set<ArraySlice<UInt8>> = []
        for value in values where value.key.starts(with: taskPrefix) {
            tasks.insert(value.key[taskPrefix.count...])
        }
        return values.filter { $0.key.starts(with: attemptPrefix) && !tasks.contains($0.key[attemptPrefix.count...]) }
            .map(\.key)
    }

    /// A value's sequence number and record, when its framing and CRC check.
    static func record(from bytes: [UInt8]) -> (fence: Int64, seq: UInt64, record: JournalRecord)? {
        guard bytes.count >= 24 else { return nil }
        let fence = UInt64(ByteDecoding.u32(bytes, at: 0)) | UInt64(ByteDecoding.u32(bytes, at: 4)) << 32
        let seq = UInt64(ByteDecoding.u32(bytes, at: 8)) | UInt64(ByteDecoding.u32(bytes, at: 12)) << 32
        let length = Int(ByteDecoding.u32(bytes, at: 16))
        guard length == bytes.count - 24, CRC32.checksum(bytes[24...]) == ByteDecoding.u32(bytes, at: 20) else {
            return nil
        }
        guard let record = try? JournalRecord.decode(bytes[24...]) else { return nil }
        return (Int64(bitPattern: fence), seq, record)
    }
}
