import Dispatch
import Glibc
import SkyNetCore
import Synchronization

/// The journal's writer on etcd (HA mode, DESIGN.md §8b): the counterpart of the file ``Journal``.
/// ``append(_:)`` queues a record and returns its sequence number (counted from 1, as the file
/// journal counts); one thread of its own commits what is queued in transactions laid out by
/// ``EtcdJournalLayout`` and fenced on the leader key's create revision, then calls `onCommit` with
/// the highest sequence number etcd holds (a majority of its members on disk). Group commit as the
/// file journal has: everything queued while a transaction was in flight goes in the next ones.
///
/// Fatal, as a failed disk write is for the file journal (`onFailure`; nothing more is committed):
/// - a transaction whose fence no longer holds: another member leads, and this one's writes are
///   refused by etcd whatever it believes;
/// - etcd unreachable (every member) for longer than `giveUpAfter`: the term cannot be trusted.
///
package final class EtcdJournal: Sendable {
    private struct Queue {
        var records: [JournalRecord] = []
        /// The sequence number of the first record in `records`.
        var firstSeq: UInt64 = 1
        var closed = false
    }

    private let endpoints: [String]
    private let layout: EtcdJournalLayout
    private let fence: Int64
    private let giveUpAfter: Duration
    private let queue = Mutex(Queue())
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let failure = Mutex<EtcdError?>(nil)
    private let abandoned = Atomic<Bool>(false)
    /// How often the writer compacts etcd's history (the journal's keys are rewritten and deleted as
    /// tasks come and go; etcd keeps every old version until compacted).
    static let compactEvery = Duration.seconds(60)
    private let onCommit: @Sendable (UInt64) -> Void
    private let onFailure: @Sendable (EtcdError) -> Void

    /// Starts the writer.
    /// - Parameters:
    ///   - endpoints: etcd's members (`http://host:port`).
    ///   - layout: the cluster's keys.
    ///   - fence: the leader key's create revision for this term.
    ///   - giveUpAfter: how long etcd may be unreachable before the journal fails (a leader's term is
    ///     shorter than its lease: past it, nothing it writes can be trusted to be its term's).
    /// - Throws: ``EtcdError`` for a bad endpoint.
    package init(
        endpoints: [String],
        layout: EtcdJournalLayout,
        fence: Int64,
        giveUpAfter: Duration = .seconds(3),
        onCommit: @escaping @Sendable (UInt64) -> Void,
        onFailure: @escaping @Sendable (EtcdError) -> Void
    ) throws(EtcdError) {
        _ = try EtcdClient(endpoints: endpoints)  // checks them now, not on the writer thread
        self.endpoints = endpoints
        self.layout = layout
        self.fence = fence
        self.giveUpAfter = giveUpAfter
        self.onCommit = onCommit
        self.onFailure = onFailure
        if let rc = POSIX.detachedThread({ self.writerLoop() }) {
            throw EtcdError(.unavailable, "cannot start the etcd journal's writer thread (errno \(rc))")
        }
    }

    /// Queues a record; returns its sequence number.
    @discardableResult
    package func append(_ record: JournalRecord) -> UInt64 {
        let (seq, wake) = self.queue.withLock { queue -> (UInt64, Bool) in
            queue.records.append(record)
            return (queue.firstSeq + UInt64(queue.records.count) - 1, queue.records.count == 1)
        }
        if wake { self.wake.signal() }
        return seq
    }

    /// Stops the writer without waiting for it: its term is over, and nothing it commits from now
    /// is reported (its writes are fenced off in etcd anyway).
    package func abandon() {
        self.abandoned.store(true, ordering: .relaxed)
        self.queue.withLock { queue in
            queue.closed = true
            queue.records = []
        }
        self.wake.signal()
    }

    /// Commits what is queued, stops the writer.
    /// - Returns: the writer's failure, if it failed (before or while closing).
    @discardableResult
    package func close() -> EtcdError? {
        let already = self.queue.withLock { queue -> Bool in
            defer { queue.closed = true }
            return queue.closed
        }
        if !already {
            self.wake.signal()
            self.done.wait()
        }
        return self.failure.withLock { $0 }
    }

    private func writerLoop() {
        // The client belongs to this thread.
        guard let client = try? EtcdClient(endpoints: self.endpoints, timeout: .seconds(1)) else {
            self.fail(EtcdError(.badEndpoint, "bad etcd endpoints"))
            self.done.signal()
            return
        }
        var failed = false
        var lastRevision: Int64 = 0
        var lastCompaction = ContinuousClock.now
        while true {
            self.wake.wait()
            let (records, firstSeq, closed) = self.queue.withLock { queue -> ([JournalRecord], UInt64, Bool) in
                let taken = (queue.records, queue.firstSeq, queue.closed)
                queue.firstSeq += UInt64(queue.records.count)
                queue.records = []
                return taken
            }
            if !failed, !records.isEmpty {
                for transaction in self.layout.transactions(for: records, firstSeq: firstSeq) {
                    if self.abandoned.load(ordering: .relaxed) { break }
                    switch self.commit(transaction, client: client) {
                    case .failure(let error):
                        failed = true
                        self.fail(error)
                    case .success(let revision):
                        lastRevision = revision
                            self.onCommit(transaction.lastSeq)
                    }
                    if failed { break }
                }
                if !failed, ContinuousClock.now - lastCompaction >= Self.compactEvery, lastRevision > 0 {
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
        guard !self.abandoned.load(ordering: .relaxed) else { return }
        self.failure.withLock { $0 = $0 ?? error }
        self.onFailure(error)
    }
}
