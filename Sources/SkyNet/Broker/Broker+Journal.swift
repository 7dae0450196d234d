import ZeroMQ
import Logging
// The durable commit pipeline (DESIGN.md §8): records go to the ``Journal`` (its own thread writes
// and syncs them in groups), what a record promises waits in ``CommitPipeline`` until the commit
// covers it, and the journal is compacted when it has grown to twice its live size.
extension Broker {
    /// Appends a record that a message waits for (a SUBMIT before its ACCEPTED, a RESULT before it
    /// is forwarded): messages deferred after this wait for its commit.
    func appendPromised(_ record: JournalRecord) {
        guard let journal = self.journal else { return }
        self.pipeline.appended(journal.append(record))
    }

    /// The journal holds everything up to `seq`: send what waited for it.
    func journalCommitted(_ seq: UInt64) {
        for released in self.pipeline.committed(seq) {
            if let job = released.coordinator.job {
                // A detached job's final result is on disk: keep it and pass it to its followers.
                if let id = released.result { self.jobResultCommitted(job, id, frames: released.frames) }
                continue
            }
            self.sendFrames(released.frames, to: released.coordinator, keepingResult: released.result)
        }
    }

    /// Replaces the journal with a snapshot of what is live: queued and running tasks, kept results
    /// and detached jobs' results.
    func compactJournal() {
        guard let journal = self.journal else { return }
        let snapshot = self.state.snapshot() + self.pipeline.snapshot() + self.jobs.snapshot()
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
}
