/// The coordinator's record of every task in a job: which attempt is current, and whether it has its
/// final result. A pure state machine: the ``Coordinator`` feeds it results and carries out its
/// ``Decision``s.
///
/// Rules (DESIGN.md §5): the first final result for a task wins and later ones are duplicates
/// (dropped, counted); a completed result ends a task whichever attempt produced it; a failed result
/// of an attempt that is no longer current is stale; a failed current attempt is retried by the
/// policy while attempts remain.
package struct RetryLedger {
    /// 12 bytes: a million-task job's table stays small (the task itself is in ``tasks``).
    package struct Entry {
        /// The task's place in ``tasks``.
        package let index: UInt32
        package var attempt: UInt32
        package var isFinal = false
        /// The current attempt runs on the local ScanSystem (not at the broker).
        package var isLocal = false
        /// The broker has said ACCEPTED for it at least once.
        package var isAccepted = false
        /// Its first SUBMIT has gone out (the coordinator sends a job's SUBMITs through a window).
        package var isSent = false
    }

    package enum Decision: Equatable {
        case final(FinalResult)
        case retryLocal(ScanTask)
        case retryRemote(ScanTask)
        case duplicate
        case stale
    }

    package let policy: RetryPolicy
    /// The job is being cancelled: no more retries; a task whose attempt ends without completing is
    /// final as cancelled (or failed when it had no attempts left anyway).
    package private(set) var cancelling = false
    package private(set) var entries: [TaskID: Entry] = [:]
    /// The job's tasks as submitted, in order (shared with the caller's array when it can be).
    package private(set) var tasks: [ScanTask] = []
    package private(set) var outstanding = 0
    /// Tasks whose first SUBMIT went out and that have neither been ACCEPTED nor ended yet.
    package private(set) var unanswered = 0
    package private(set) var summary = JobSummary()

    package init(policy: RetryPolicy) { self.policy = policy }

    /// Adds a task at attempt 1 (or its own attempt). Returns false for an id already in the job.
    package mutating func add(_ task: ScanTask) -> Bool {
        guard self.entries[task.id] == nil else { return false }
        self.entries[task.id] = Entry(index: UInt32(self.tasks.count), attempt: task.attempt)
        self.tasks.append(task)
        self.outstanding += 1
        self.summary.tasks += 1
        return true
    }

    /// Adds a job's tasks (sharing the array's storage when the ledger is empty).
    /// - Returns: the first id that appears twice (the ledger is then not to be used), or nil.
    package mutating func add(contentsOf tasks: [ScanTask]) -> TaskID? {
        let base = self.tasks.count
        if self.tasks.isEmpty { self.tasks = tasks } else { self.tasks.append(contentsOf: tasks) }
        self.entries.reserveCapacity(self.entries.count + tasks.count)
        for (offset, task) in tasks.enumerated() {
            guard self.entries[task.id] == nil else { return task.id }
            self.entries[task.id] = Entry(index: UInt32(base + offset), attempt: task.attempt)
        }
        self.outstanding += tasks.count
        self.summary.tasks += tasks.count
        return nil
    }

    /// The task an entry stands for.
    package func task(_ entry: Entry) -> ScanTask { self.tasks[Int(entry.index)] }

    /// The task with this id, as submitted.
    package func task(_ id: TaskID) -> ScanTask? { self.entries[id].map(self.task) }

    /// The broker said ACCEPTED. Returns true the first time for a task (a resend after a broker
    /// restart is accepted again, and must not count twice).
    package mutating func accepted(_ id: TaskID) -> Bool {
        guard let entry = self.entries[id], !entry.isAccepted else { return false }
        self.entries[id]!.isAccepted = true
        if entry.isSent && !entry.isFinal { self.unanswered -= 1 }
        return true
    }

    /// The broker requeued a task after its worker was lost.
    package mutating func requeued(_ id: TaskID, attempt: UInt32) -> Bool {
        guard var entry = self.entries[id], !entry.isFinal, attempt > entry.attempt else { return false }
        entry.attempt = attempt
        self.entries[id] = entry
        self.summary.requeued += 1
        return true
    }

    /// An attempt's outcome arrived (from a worker via the broker, from the broker, or from the local
    /// ScanSystem).
    /// - Parameter remoteAllowed: false when the broker is lost, so a remote retry becomes final.
    package mutating func record(
        _ id: TaskID,
        attempt: UInt32,
        outcome: ScanOutcome,
        system: String,
        remoteAllowed: Bool = true
    ) -> Decision {
        guard var entry = self.entries[id] else { return .stale }
        if entry.isFinal {
            self.summary.duplicates += 1
            return .duplicate
        }
        if case .completed(let output) = outcome {
            // Built in the decision itself: handed to `finish`, the result was copied field by field
            // (an outlined copy) and the original destroyed, once per task.
            self.end(&entry, id, .completed)
            return .final(
                FinalResult(
                    task: self.task(entry),
                    status: .completed,
                    attempts: Int(attempt),
                    system: system,
                    output: output
                )
            )
        }
        guard attempt == entry.attempt else { return .stale }
        let reason: String
        var detail: [UInt8] = []
        switch outcome {
        case .failed(let text, let bytes): (reason, detail) = (text, bytes)
        case .timedOut: reason = "timed out"
        case .cancelled: reason = "cancelled"
        case .completed: reason = ""
        }
        var placement = self.policy.placement
        if placement == .remote && !remoteAllowed { placement = .none }
        /// The task's final result with this attempt's error.
        func ended(_ status: FinalResult.Status) -> FinalResult {
            FinalResult(
                task: self.task(entry),
                status: status,
                attempts: Int(attempt),
                system: system,
                error: reason,
                errorDetail: detail
            )
        }
        if self.cancelling {
            let exhausted = Int(attempt) >= self.policy.maxAttempts || placement == .none
            return self.finish(&entry, ended(exhausted && outcome != .cancelled ? .failed : .cancelled))
        }
        if Int(attempt) < self.policy.maxAttempts && placement != .none {
            entry.attempt = attempt + 1
            entry.isLocal = placement == .local
            self.entries[id] = entry
            self.summary.retried += 1
            var next = self.task(entry)
            next.attempt = attempt + 1
            if placement == .local {
                self.summary.retriedLocally += 1
                return .retryLocal(next)
            }
            return .retryRemote(next)
        }
        return self.finish(&entry, ended(outcome == .cancelled ? .cancelled : .failed))
    }

    /// Whether `attempt` is still the task's current, unfinished attempt (a delayed retry checks this
    /// before it starts).
    package func isCurrent(_ id: TaskID, attempt: UInt32) -> Bool {
        guard let entry = self.entries[id] else { return false }
        return !entry.isFinal && entry.attempt == attempt
    }

    /// Ends a task without a result from anywhere (e.g. the broker rejected it).
    package mutating func fail(_ id: TaskID, reason: String, system: String) -> Decision {
        guard var entry = self.entries[id] else { return .stale }
        if entry.isFinal { return .duplicate }
        return self.finish(
            &entry,
            FinalResult(
                task: self.task(entry),
                status: .failed,
                attempts: Int(entry.attempt),
                system: system,
                error: reason
            )
        )
    }

    /// Starts cancelling the job: no more retries. Returns the tasks whose current attempt is at the
    /// broker (to cancel there) and ends every local one at once as cancelled (its running scan's
    /// result will be stale).
    package mutating func cancel(reason: String) -> (remote: [TaskID], finals: [FinalResult]) {
        self.cancelling = true
        var remote: [TaskID] = []
        var finals: [FinalResult] = []
        for id in self.entries.keys.sorted() {
            guard var entry = self.entries[id], !entry.isFinal else { continue }
            if entry.isLocal {
                let result = FinalResult(
                    task: self.task(entry),
                    status: .cancelled,
                    attempts: Int(entry.attempt),
                    system: "local",
                    error: reason
                )
                if case .final(let final) = self.finish(&entry, result) { finals.append(final) }
            } else {
                remote.append(id)
            }
        }
        return (remote, finals)
    }

    /// Ends every task that is still not final as cancelled (the broker did not answer its CANCEL in
    /// time).
    package mutating func cancelRemaining(reason: String) -> [FinalResult] {
        var finals: [FinalResult] = []
        for id in self.entries.keys.sorted() {
            guard var entry = self.entries[id], !entry.isFinal else { continue }
            let result = FinalResult(
                task: self.task(entry),
                status: .cancelled,
                attempts: Int(entry.attempt),
                system: entry.isLocal ? "local" : "broker",
                error: reason
            )
            if case .final(let final) = self.finish(&entry, result) { finals.append(final) }
        }
        return finals
    }

    /// Takes the result (consumed, so that it moves into the decision without a copy).
    private mutating func finish(_ entry: inout Entry, _ result: consuming FinalResult) -> Decision {
        self.end(&entry, result.task.id, result.status)
        if result.status == .failed { self.summary.deadLetters.append(copy result) }
        return .final(result)
    }

    /// Marks task `id`'s entry final and counts how it ended.
    private mutating func end(_ entry: inout Entry, _ id: TaskID, _ status: FinalResult.Status) {
        entry.isFinal = true
        self.entries[id] = entry
        self.outstanding -= 1
        if entry.isSent && !entry.isAccepted { self.unanswered -= 1 }
        switch status {
        case .completed: self.summary.completed += 1
        case .failed: self.summary.failed += 1
        case .cancelled: self.summary.cancelled += 1
        }
    }

    /// Marks a task's first SUBMIT as sent. Returns false when it needs none any more (it is final,
    /// or runs locally since the broker was lost).
    package mutating func markSent(_ id: TaskID) -> Bool {
        guard let entry = self.entries[id], !entry.isFinal, !entry.isLocal, !entry.isSent else { return false }
        self.entries[id]!.isSent = true
        self.unanswered += 1
        return true
    }

    /// The broker refused a task for want of room (its queue, or this coordinator's share of it):
    /// the task counts as not sent, to go again later. False when it is not a first SUBMIT still
    /// unanswered (a retry, or a task already accepted, final or local).
    package mutating func unsend(_ id: TaskID) -> Bool {
        guard let entry = self.entries[id], entry.isSent, !entry.isAccepted, !entry.isFinal, !entry.isLocal,
            !self.cancelling
        else { return false }
        self.entries[id]!.isSent = false
        self.unanswered -= 1
        return true
    }

    /// Whether the task's first SUBMIT has gone out.
    package func isSent(_ id: TaskID) -> Bool { self.entries[id]?.isSent ?? false }

    /// Tasks that are not final, whose current attempt is at the broker, and that were sent, in id
    /// order.
    package var unfinishedRemoteTasks: [ScanTask] {
        self.entries.values.filter { !$0.isFinal && !$0.isLocal && $0.isSent }.map { entry in
            var task = self.task(entry)
            task.attempt = entry.attempt
            return task
        }.sorted { $0.id < $1.id }
    }

    /// Tasks that are not final and whose current attempt is at the broker: (id, attempt).
    package var unfinishedRemote: [(TaskID, UInt32)] {
        self.entries.filter { !$0.value.isFinal && !$0.value.isLocal }.map { ($0.key, $0.value.attempt) }.sorted {
            $0.0 < $1.0
        }
    }

    package func currentAttempt(_ id: TaskID) -> UInt32? { self.entries[id]?.attempt }
}
