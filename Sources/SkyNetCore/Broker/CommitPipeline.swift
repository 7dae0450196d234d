import DequeModule

/// A durable broker's promises as a pure state machine: what may leave only once the journal holds
/// it, and results kept for coordinators that have not come back. It touches no file, socket or
/// clock: the ``Broker`` appends to the ``Journal``, tells this struct the sequence numbers, and
/// carries out what ``committed(_:)`` releases (DESIGN.md §8).
///
/// Rules:
/// - **ACCEPTED means on disk.** An ACCEPTED (or a RESULT) waits here until the journal's commit
///   covers the last record appended before it, and messages leave in the order they were deferred.
/// - **A result is on disk before it is forwarded.** A worker's RESULT is appended, deferred, and
///   released to its coordinator only by the commit that covers it.
/// - **Kept results.** A result that cannot be delivered (its coordinator has not reconnected since
///   a restart, or is gone) is kept until `expires`; a resend of that task gets it instead of running
///   again.
package struct CommitPipeline {
    /// A message deferred until the journal holds everything up to `seq`.
    package struct Deferred: Equatable {
        package let seq: UInt64
        package let coordinator: PeerID
        package let frames: [[UInt8]]
        /// A RESULT for this task: kept for its coordinator if it cannot be delivered now.
        package let result: TaskID?
    }

    /// A result waiting for its coordinator to ask again.
    package struct StoredResult: Equatable {
        package let coordinator: PeerID
        package let frames: [[UInt8]]
        package let expires: ContinuousClock.Instant
    }

    /// The sequence number of the last record appended to the journal.
    package private(set) var lastAppended: UInt64 = 0
    /// The highest sequence number the journal has on disk.
    package private(set) var committed: UInt64 = 0
    private var deferred = Deque<Deferred>()
    /// Results recovered from the journal or undeliverable, until their coordinator asks again.
    package private(set) var storedResults: [TaskID: StoredResult] = [:]

    /// Nothing waits for the journal.
    package var isDrained: Bool { self.deferred.isEmpty }

    /// The journal gave `seq` to the record just appended.
    package mutating func appended(_ seq: UInt64) { self.lastAppended = max(self.lastAppended, seq) }

    /// Holds `frames` for `coordinator` until the journal holds every record appended so far.
    package mutating func deferUntilCommitted(_ frames: [[UInt8]], to coordinator: PeerID, result: TaskID? = nil) {
        self.deferred.append(Deferred(seq: self.lastAppended, coordinator: coordinator, frames: frames, result: result))
    }

    /// The journal holds everything up to `seq`.
    /// - Returns: what waited for it, in the order it was deferred (nothing for an old `seq`).
    package mutating func committed(_ seq: UInt64) -> [Deferred] {
        guard seq > self.committed else { return [] }
        self.committed = seq
        var released: [Deferred] = []
        while let first = self.deferred.first, first.seq <= seq {
            released.append(self.deferred.removeFirst())
        }
        return released
    }

    /// Keeps a result for `coordinator` until `expires`.
    package mutating func keep(
        _ id: TaskID,
        frames: [[UInt8]],
        for coordinator: PeerID,
        until expires: ContinuousClock.Instant
    ) {
        self.storedResults[id] = StoredResult(coordinator: coordinator, frames: frames, expires: expires)
    }

    /// A resend of `id` by `coordinator`: the result kept for it, which is then forgotten.
    package mutating func takeResult(_ id: TaskID, for coordinator: PeerID) -> [[UInt8]]? {
        guard let stored = self.storedResults[id], stored.coordinator == coordinator else { return nil }
        self.storedResults[id] = nil
        return stored.frames
    }

    /// Forgets kept results whose coordinator did not come back in time.
    package mutating func expireResults(now: ContinuousClock.Instant) {
        self.storedResults = self.storedResults.filter { $0.value.expires > now }
    }

    /// The kept results as journal records, for a compaction snapshot.
    package func snapshot() -> [JournalRecord] {
        self.storedResults.sorted(by: { $0.key < $1.key }).map { id, stored in
            .result(id, coordinator: stored.coordinator, frames: stored.frames)
        }
    }
}
