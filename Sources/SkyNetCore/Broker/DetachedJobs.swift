import Logging
/// A durable broker's detached jobs as a pure state machine: for each job, the final results on disk
/// (as encoded JOB result frames, in the order they were committed), the kind and input of its
/// unfinished tasks (a task stays pending until its result is on disk), and who follows it. It
/// touches no socket and reads no clock; the ``Broker`` feeds it events with the time and sends
/// what it returns (DESIGN.md §8).
///
/// A job's tasks themselves are queued and leased by ``BrokerState``, owned by the job's
/// ``PeerID/job(_:)`` peer; this struct keeps what outlives them.
package struct DetachedJobs {
    /// What the broker keeps for one job.
    package struct Record {
        package var results: [TaskID: [[UInt8]]] = [:]
        package var order: [TaskID] = []
        package var pending: [TaskID: (kind: String, input: [UInt8])] = [:]
        package var completed = 0
        package var failed = 0
        package var cancelled = 0
        package var followers: Set<PeerID> = []
        package var cancelling = false
        package var lastActivity: ContinuousClock.Instant
        /// The key (CURVE, Z85) that submitted the job: only it sees the job. Nil without CURVE.
        package var owner: String?
        /// The last few tasks that failed every attempt, with their last error (for the dashboard).
        package var deadLetters: [JobFigures.DeadLetter] = []
        /// What its submitter called it (`--name`), nil for none.
        package var name: String?

        package init(now: ContinuousClock.Instant) { self.lastActivity = now }
    }

    /// A job's result that reached the disk: who to send it to, and the job's status to send them
    /// after it when that result was the job's last (its followers are then let go).
    package struct Committed {
        package var followers: [PeerID]
        package var finalStatus: DetachedJobStatus?
    }

    /// Finished jobs are forgotten this long after their last result (24 h by default).
    package let retention: Duration
    package private(set) var records: [TaskID: Record] = [:]

    /// The tasks of jobs forgotten since the broker started.
    package private(set) var expiredTotals = BrokerStatus.TaskTotals()

    package init(retention: Duration) { self.retention = retention }

    /// Every detached job's tasks, forgotten ones included (``BrokerStatus/TaskTotals``).
    package var totals: BrokerStatus.TaskTotals {
        var totals = self.expiredTotals
        for record in self.records.values { totals.add(Self.totals(of: record)) }
        return totals
    }

    private static func totals(of record: Record) -> BrokerStatus.TaskTotals {
        var totals = BrokerStatus.TaskTotals()
        totals.add(
            tasks: record.results.count + record.pending.count,
            completed: record.completed,
            failed: record.failed,
            cancelled: record.cancelled
        )
        return totals
    }

    package var isEmpty: Bool { self.records.isEmpty }

    // MARK: Tasks

    /// A task of `job` was accepted (or recovered from the journal) and has no final result yet.
    /// A new job belongs to `owner` (the submitting key with CURVE).
    package mutating func taskPending(
        _ id: TaskID,
        of job: TaskID,
        kind: String,
        input: [UInt8],
        owner: String? = nil,
        now: ContinuousClock.Instant
    ) {
        if self.records[job] == nil {
            var record = Record(now: now)
            record.owner = owner
            self.records[job] = record
        }
        self.records[job]?.pending[id] = (kind, input)
        self.records[job]?.lastActivity = now
    }

    /// Whether the job exists (and, for a job with an owner, `requester` is that owner): a job of
    /// another key is "no such job" to everyone else.
    package func isVisible(_ job: TaskID, to requester: String?) -> Bool {
        guard let record = self.records[job] else { return false }
        return record.owner == nil || record.owner == requester
    }

    /// Whether the broker holds `job`.
    package func exists(_ job: TaskID) -> Bool { self.records[job] != nil }

    /// The owner recorded in the journal, applied after recovery.
    package mutating func recoverOwner(_ key: String, of job: TaskID) { self.records[job]?.owner = key }

    /// Names `job`; false when it has no record or already has this name.
    package mutating func name(_ job: TaskID, _ name: String) -> Bool {
        guard self.records[job] != nil, self.records[job]?.name != name else { return false }
        self.records[job]?.name = name
        return true
    }

    /// Whether `id` of `job` already has its final result (a resend of it is answered ACCEPTED).
    package func hasResult(_ id: TaskID, of job: TaskID) -> Bool { self.records[job]?.results[id] != nil }

    /// The kind and input of a pending task (a JOB result carries them).
    package func pendingTask(_ id: TaskID, of job: TaskID) -> (kind: String, input: [UInt8])? {
        self.records[job]?.pending[id]
    }

    /// Whether `job` is being cancelled (its failed attempts are not retried).
    package func isCancelling(_ job: TaskID) -> Bool { self.records[job]?.cancelling ?? false }

    /// Whether a failed attempt of a job's task runs again: the broker retries for a detached job,
    /// at once, while attempts are left and the job is not being cancelled.
    /// - Returns: the next attempt's number, or nil when this result is the task's final one.
    package func nextAttempt(
        after status: ResultStatus,
        attempt: UInt32,
        maxAttempts: UInt16,
        of job: TaskID
    ) -> UInt32? {
        let retryable = status == .failed || status == .timedOut
        guard retryable, attempt < UInt32(maxAttempts), !self.isCancelling(job) else { return nil }
        return attempt + 1
    }

    /// A final result recovered from the journal.
    package mutating func recoverResult(_ id: TaskID, of job: TaskID, frames: [[UInt8]], now: ContinuousClock.Instant) {
        _ = self.store(id, of: job, frames: frames, now: now)
    }

    /// A final result of `job` is on disk: it is kept and goes to the job's followers.
    /// - Returns: nil for a task that had one already (nothing to send).
    package mutating func resultCommitted(
        _ id: TaskID,
        of job: TaskID,
        frames: [[UInt8]],
        now: ContinuousClock.Instant
    ) -> Committed? {
        guard self.records[job] != nil, self.store(id, of: job, frames: frames, now: now),
            let record = self.records[job]
        else { return nil }
        let followers = Array(record.followers)
        let status = Self.account(of: job, record)
        guard status.done, !followers.isEmpty else { return Committed(followers: followers, finalStatus: nil) }
        self.records[job]?.followers.removeAll()
        return Committed(followers: followers, finalStatus: status)
    }

    private mutating func store(_ id: TaskID, of job: TaskID, frames: [[UInt8]], now: ContinuousClock.Instant) -> Bool {
        var record = self.records.removeValue(forKey: job) ?? Record(now: now)
        defer { self.records[job] = record }
        guard record.results[id] == nil else { return false }
        record.results[id] = frames
        record.order.append(id)
        record.pending[id] = nil
        record.lastActivity = now
        switch Self.status(of: frames) {
        case .completed: record.completed += 1
        case .cancelled: record.cancelled += 1
        default:
            record.failed += 1
            let error = frames.count > 4 ? FailureText.decode(frames[4]).message : "failed"
            record.deadLetters.append(
                JobFigures.DeadLetter(task: "\(id)", error: error.prefix(utf8Bytes: JobFigures.maxErrorLength))
            )
            if record.deadLetters.count > JobFigures.maxDeadLetters { record.deadLetters.removeFirst() }
        }
        return true
    }

    /// The most recently active jobs (at most `limit`), as the dashboard lists them: counts without
    /// the pending ids (``status(of:for:)`` sorts those), and the last dead letters.
    package func recent(limit: Int, now: ContinuousClock.Instant) -> [BrokerStatus.Job] {
        self.records.sorted { $0.value.lastActivity > $1.value.lastActivity }.prefix(limit).map { job, record in
            let finished = record.pending.isEmpty
            return BrokerStatus.Job(
                id: "\(job)",
                name: record.name ?? "detached job",
                detached: true,
                state: record.cancelling && !finished ? "cancelling" : finished ? "finished" : "running",
                tasks: record.results.count + record.pending.count,
                completed: record.completed,
                failed: record.failed,
                cancelled: record.cancelled,
                atBroker: record.pending.count,
                endedSecondsAgo: finished ? (now - record.lastActivity).seconds : nil,
                deadLetters: record.deadLetters
            )
        }
    }

    /// The RESULT status inside JOB result frames.
    package static func status(of frames: [[UInt8]]) -> ResultStatus? {
        guard frames.count > 2, let header = try? Header.decode(frames[2]) else { return nil }
        return ResultStatus(rawValue: header.arg)
    }

    // MARK: Queries

    /// The job's account, as `skynet results` prints it; an error for a job this broker does not
    /// hold, or that belongs to another key than `requester`.
    package func status(of job: TaskID, for requester: String? = nil) -> DetachedJobStatus {
        guard let record = self.records[job], self.isVisible(job, to: requester) else {
            let retention = DurationParser.format(self.retention)
            return DetachedJobStatus(
                job: "\(job)",
                error: "unknown job \(job) (finished jobs are kept for \(retention))"
            )
        }
        return Self.account(of: job, record)
    }

    private static func account(of job: TaskID, _ record: Record) -> DetachedJobStatus {
        // Queued, running, or finished but not yet on disk: every task without a stored result.
        let pending = record.pending.keys
        return DetachedJobStatus(
            job: "\(job)",
            tasks: record.results.count + pending.count,
            completed: record.completed,
            failed: record.failed,
            cancelled: record.cancelled,
            pending: pending.count,
            pendingIDs: pending.sorted().prefix(100).map { "\($0)" },
            cancelling: record.cancelling
        )
    }

    /// A query for `job` from `peer`: the results so far (JOB result frames, in commit order) and
    /// the status to send after them; with `follow`, the peer also gets the rest as they come.
    package mutating func query(
        _ job: TaskID,
        follow: Bool,
        from peer: PeerID,
        requester: String? = nil
    ) -> (results: [[[UInt8]]], status: DetachedJobStatus) {
        let status = self.status(of: job, for: requester)
        guard status.error == nil, let record = self.records[job] else { return ([], status) }
        let results = record.order.compactMap { record.results[$0] }
        if follow && !status.done { self.records[job]?.followers.insert(peer) }
        return (results, status)
    }

    /// Marks `job` as being cancelled. Returns false for a job this broker does not hold (or that
    /// belongs to another key than `requester`).
    package mutating func cancel(_ job: TaskID, requester: String? = nil) -> Bool {
        guard self.isVisible(job, to: requester) else { return false }
        self.records[job]?.cancelling = true
        return true
    }

    /// A coordinator is gone: it follows no job any more.
    package mutating func followerLost(_ peer: PeerID) {
        for job in self.records.keys where self.records[job]?.followers.contains(peer) == true {
            self.records[job]?.followers.remove(peer)
        }
    }

    /// Forgets finished jobs whose last result is older than the retention. A job is finished when
    /// it has no pending task and `hasLiveTasks` says the queue holds none of it either.
    /// - Returns: each forgotten job with its results' task ids (the journal forgets them too).
    package mutating func expire(
        now: ContinuousClock.Instant,
        hasLiveTasks: (TaskID) -> Bool
    ) -> [(job: TaskID, results: [TaskID])] {
        var forgotten: [(job: TaskID, results: [TaskID])] = []
        for (job, record) in self.records.sorted(by: { $0.key < $1.key })
        where now - record.lastActivity > self.retention && record.pending.isEmpty && !hasLiveTasks(job) {
            self.expiredTotals.add(Self.totals(of: record))
            self.records[job] = nil
            forgotten.append((job, record.order))
        }
        return forgotten
    }

    /// Every stored result as journal records, for a compaction snapshot.
    package func snapshot() -> [JournalRecord] {
        var records: [JournalRecord] = []
        for (job, record) in self.records.sorted(by: { $0.key < $1.key }) {
            if let owner = record.owner { records.append(.jobOwner(job: job, key: owner)) }
            if let name = record.name { records.append(.jobName(job: job, name: name)) }
            for id in record.order {
                if let frames = record.results[id] {
                    records.append(.result(id, coordinator: .job(job), frames: frames))
                }
            }
        }
        return records
    }
}
