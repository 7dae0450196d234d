import SkyNetCore
import ZeroMQ
import Logging
// The journal's I/O (DESIGN.md §8): records go to the ``Journal`` (its own thread writes and syncs
// them in groups), its commits go to the machine (what waited for them is released), and it is
// compacted when it has grown to twice its live size. And the heartbeat tick.
extension Broker {
    /// The journal holds everything up to `seq`: send what waited for it.
    func journalCommitted(_ seq: UInt64) {
        self.machine.committed(seq, now: .now)
        self.performEffects()
    }

    /// Queues again what a journal (the file, or etcd) held, and keeps what it was.
    /// - Returns: how many tasks were queued again.
    func recover(_ recovery: JournalRecovery) -> Int {
        let queued = self.machine.recover(recovery, now: .now)
        self.recovered = Recovery(
            tasks: queued,
            results: recovery.results.count,
            records: recovery.records,
            droppedBytes: recovery.droppedBytes
        )
        return queued
    }

    /// Replaces the journal with a snapshot of what is live: queued and running tasks, kept results
    /// and detached jobs' results.
    func compactJournal() {
        guard let journal = self.journal else { return }
        let snapshot = self.machine.snapshot()
        self.compactedBytes = snapshot.reduce(0) { $0 + $1.framed().count }
        journal.compact(snapshot)
    }

    func maybeCompactJournal() {
        guard let journal = self.journal else { return }
        let size = journal.fileBytes
        guard size > self.configuration.compactionBytes, size > 2 * self.compactedBytes else { return }
        let before = size
        self.compactJournal()
        self.logger.info(
            "journal compacted",
            metadata: ["bytes.before": "\(before)", "bytes.after": "\(self.compactedBytes)"]
        )
    }

    /// Every heartbeat interval: security and accept checks, then the machine's tick (expiry,
    /// deadlines, HEARTBEATs), and the journal compacted when due.
    func heartbeatTick() {
        let now = ContinuousClock.now
        self.checkSecurity()
        self.checkAccepts(now: now)
        self.machine.tick(now: now)
        self.performEffects()
        self.maybeCompactJournal()
    }
}
