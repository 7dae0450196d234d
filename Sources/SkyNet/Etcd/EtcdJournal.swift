import Dispatch
import Glibc
import SkyNetCore
import Synchronization

/// The journal's writer on etcd (HA mode, DESIGN.md §8b): the counterpart of the file ``Journal``.
/// ``append(_:)`` queues a record and returns its sequence number (counted from 1, as the file
/// journal counts); threads of its own commit what is queued in transactions laid out by
/// ``EtcdJournalLayout`` and fenced on the leader key's create revision, then `onCommit` is called
/// with the highest sequence number up to which etcd holds every record (a majority of its members
/// on disk). Group commit as the file journal has: everything queued while a transaction was in
/// flight goes in the next ones.
///
/// **Lanes.** One transaction at a time waits a Raft round and an fsync on two members; with
/// etcd's limit of 128 operations a transaction, that bounds a single writer to a few thousand tasks
/// a second. So ``laneCount`` threads write at once, each with its own connection, and a record goes to
/// the lane of its task (or job): the records of one task are committed in order (its keys are
/// never written out of order), those of different tasks need not be. A commit is reported once
/// every record before it is committed too.
///
/// Fatal, as a failed disk write is for the file journal (`onFailure`; nothing more is committed):
/// - a transaction whose fence no longer holds: another member leads, and this one's writes are
///   refused by etcd whatever it believes;
/// - etcd unreachable (every member) for longer than `giveUpAfter`: the term cannot be trusted.
package final class EtcdJournal: Sendable {
    /// Writers at once.
    package static let laneCount = 4

    private struct LaneQueue {
        var records: [(seq: UInt64, record: JournalRecord)] = []
        var closed = false
    }

    /// One lane's queue and its writer's wake-up (a class: a `Mutex` cannot sit in an array).
    private final class Lane: Sendable {
        let queue = Mutex(LaneQueue())
        let wake = DispatchSemaphore(value: 0)
    }

    /// Which records etcd holds: every one up to `through`, and some after it.
    private struct Commits {
        var through: UInt64 = 0
        var beyond: Set<UInt64> = []

        /// `seqs` are committed. - Returns: the new `through`, when it moved.
        mutating func committed(_ seqs: [UInt64]) -> UInt64? {
            let before = self.through
            for seq in seqs where seq > self.through { self.beyond.insert(seq) }
            while self.beyond.remove(self.through + 1) != nil { self.through += 1 }
            return self.through > before ? self.through : nil
        }
    }

    private let endpoints: [String]
    private let tls: EtcdTLS?
    private let layout: EtcdJournalLayout
    private let fence: Int64
    private let giveUpAfter: Duration
    private let nextSeq = Mutex<UInt64>(1)
    private let lanes: [Lane]
    private let done = DispatchSemaphore(value: 0)
    private let commits = Mutex(Commits())
    private let failure = Mutex<EtcdError?>(nil)
    private let abandoned = Atomic<Bool>(false)
    private let failed = Atomic<Bool>(false)
    /// How often the first lane compacts etcd's history (the journal's keys are rewritten and
    /// deleted as tasks come and go; etcd keeps every old version until compacted).
    static let compactEvery = Duration.seconds(5)
    private let onCommit: @Sendable (UInt64) -> Void
    private let onFailure: @Sendable (EtcdError) -> Void

    /// Starts the writers.
    /// - Parameters:
    ///   - endpoints: etcd's members (`http://host:port`).
    ///   - layout: the cluster's keys.
    ///   - fence: the leader key's create revision for this term.
    ///   - giveUpAfter: how long etcd may be unreachable before the journal fails (a leader's term is
    ///     shorter than its lease: past it, nothing it writes can be trusted to be its term's).
    ///   - tls: for `https://` endpoints.
    /// - Throws: ``EtcdError`` for a bad endpoint.
    package init(
        endpoints: [String],
        layout: EtcdJournalLayout,
        fence: Int64,
        giveUpAfter: Duration = .seconds(3),
        tls: EtcdTLS? = nil,
        onCommit: @escaping @Sendable (UInt64) -> Void,
        onFailure: @escaping @Sendable (EtcdError) -> Void
    ) throws(EtcdError) {
        _ = try EtcdClient(endpoints: endpoints, tls: tls)  // checks them now, not on the writer threads
        self.endpoints = endpoints
        self.tls = tls
        var layout = layout
        layout.fence = fence
        self.layout = layout
        self.fence = fence
        self.giveUpAfter = giveUpAfter
        self.onCommit = onCommit
        self.onFailure = onFailure
        self.lanes = (0..<Self.laneCount).map { _ in Lane() }
        for lane in 0..<Self.laneCount {
            if let rc = POSIX.detachedThread({ self.writerLoop(lane) }) {
                throw EtcdError(.unavailable, "cannot start the etcd journal's writer thread (errno \(rc))")
            }
        }
    }

    /// Queues a record; returns its sequence number.
    @discardableResult
    package func append(_ record: JournalRecord) -> UInt64 {
        let subject = EtcdJournalLayout.subject(of: record)
        let lane = Int(truncatingIfNeeded: (subject.high ^ subject.low) % UInt64(Self.laneCount))
        // The number and the lane's queue under one lock order (number, then lane), so that a lane
        // holds its records in the order they were numbered.
        let (seq, wake) = self.nextSeq.withLock { next -> (UInt64, Bool) in
            let seq = next
            next += 1
            let wake = self.lanes[lane].queue.withLock { queue -> Bool in
                queue.records.append((seq, record))
                return queue.records.count == 1
            }
            return (seq, wake)
        }
        if wake { self.lanes[lane].wake.signal() }
        return seq
    }

    /// Stops the writers without waiting for them: the term is over, and nothing they commit from
    /// now is reported (their writes are fenced off in etcd anyway).
    package func abandon() {
        self.abandoned.store(true, ordering: .relaxed)
        for lane in self.lanes {
            lane.queue.withLock { queue in
                queue.closed = true
                queue.records = []
            }
            lane.wake.signal()
        }
    }

    /// Commits what is queued, stops the writers.
    /// - Returns: the journal's failure, if it failed (before or while closing).
    @discardableResult
    package func close() -> EtcdError? {
        var waiting = 0
        for lane in self.lanes {
            let already = lane.queue.withLock { queue -> Bool in
                defer { queue.closed = true }
                return queue.closed
            }
            if !already {
                waiting += 1
                lane.wake.signal()
            }
        }
        for _ in 0..<waiting { self.done.wait() }
        return self.failure.withLock { $0 }
    }

    private func writerLoop(_ lane: Int) {
        // The client belongs to this thread.
        guard let client = try? EtcdClient(endpoints: self.endpoints, timeout: .seconds(1), tls: self.tls) else {
            self.fail(EtcdError(.badEndpoint, "bad etcd endpoints"))
            self.done.signal()
            return
        }
        var lastRevision: Int64 = 0
        var lastCompaction = ContinuousClock.now
        while true {
            self.lanes[lane].wake.wait()
            let (records, closed) = self.lanes[lane].queue.withLock { queue in
                defer { queue.records = [] }
                return (queue.records, queue.closed)
            }
            if !self.failed.load(ordering: .relaxed), !records.isEmpty {
                for transaction in self.layout.transactions(for: records) {
                    if self.abandoned.load(ordering: .relaxed) || self.failed.load(ordering: .relaxed) { break }
                    switch self.commit(transaction, client: client) {
                    case .failure(let error):
                        self.fail(error)
                    case .success(let revision):
                        lastRevision = revision
                        if let through = self.commits.withLock({ $0.committed(transaction.seqs) }),
                            !self.abandoned.load(ordering: .relaxed)
                        {
                            self.onCommit(through)
                        }
                    }
                }
                if lane == 0, !self.failed.load(ordering: .relaxed),
                    ContinuousClock.now - lastCompaction >= Self.compactEvery, lastRevision > 0
                {
                    lastCompaction = .now
                    // Best effort: a compaction already past this revision, or a member away, is no failure.
                    try? client.compact(revision: lastRevision)
                }
            }
            if closed {
                client.close()
                self.done.signal()
                return
            }
        }
    }

    /// Commits one transaction, trying again while etcd is unreachable for up to ``giveUpAfter``.
    /// - Returns: the store's revision after it, or why the journal must stop.
    private func commit(
        _ transaction: EtcdJournalLayout.Transaction,
        client: EtcdClient
    ) -> Result<Int64, EtcdError> {
        let request = EtcdAPI.TxnRequest(
            compare: [.createRevision(key: self.layout.leaderKey, equals: self.fence)],
            success: transaction.operations
        )
        let deadline = ContinuousClock.now + self.giveUpAfter
        while true {
            do throws(EtcdError) {
                let reply = try client.txn(request)
                guard reply.succeeded else {
                    return .failure(
                        EtcdError(.refused, "another broker leads: this one's journal writes are fenced off")
                    )
                }
                return .success(reply.header.revision)
            } catch {
                guard error.code == .unavailable, ContinuousClock.now < deadline,
                    !self.abandoned.load(ordering: .relaxed)
                else { return .failure(error) }
                usleep(50_000)
            }
        }
    }

    private func fail(_ error: EtcdError) {
        self.failed.store(true, ordering: .relaxed)
        guard !self.abandoned.load(ordering: .relaxed) else { return }
        let first = self.failure.withLock { failure -> Bool in
            defer { failure = failure ?? error }
            return failure == nil
        }
        if first { self.onFailure(error) }
    }
}
