/// The coordinator's record of every task in a job: which attempt is current, and whether it has its
/// final result. A pure state machine: the ``Coordinator`` feeds it results and carries out its
/// ``Decision``s.
///
/// Rules (DESIGN.md §5): the first final result for a task wins and later ones are duplicates
/// (dropped, counted); a completed result ends a task whichever attempt produced it; a failed result
/// of an attempt that is no longer current is stale; a failed current attempt is retried by the
/// policy while attempts remain.
package struct RetryLedger {
    /// 8 bytes, kept in the order of ``tasks``: a million-task job's table stays small.
    package struct Entry {
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
    package private(set) var cancelling: Bool
    /// Each task's entry, at its place in ``tasks``.
    package private(set) var entries: [Entry]
    /// The job's tasks as submitted, in order (shared with the caller's array when it can be).
    package private(set) var tasks: [ScanTask]
    /// Where a task is (``index(of:)``): the job's first tasks, while their ids follow one another
    /// (``TaskID/Run``: `skynet submit` and the typed API number their tasks so), need no table: a
    /// task's place is its id's distance from the first. Any other task is in `places`. With a
    /// table of every id, each ACCEPTED, RESULT and SUBMIT looked its id up in a dictionary of the
    /// whole job, which for 200,000 tasks missed the CPU's caches most of the time: about a tenth of
    /// the CPU time of the deep-credit benchmark, all processes together, in a sampled profile.
    private var run: (high: UInt64, low: UInt64, count: Int)
    private var places: [TaskID: UInt32]
    package private(set) var outstanding: Int
    /// Tasks whose first SUBMIT went out and that have neither been ACCEPTED nor ended yet.
    package private(set) var unanswered: Int
    package private(set) var summary: JobSummary

    /// Which completed results keep their output (``OutputUse``).
    package let outputs: OutputUse

    /// - Parameter storage: an array whose capacity the entries may use (``takeEntryStorage()`` of a
    ///   finished ledger; emptied here): a job of one task at a time then allocates no table of its own.
    ///
    /// Every stored property is set here rather than given an initial value where it is declared:
    /// with initial values, the optimizer built the ledger in a temporary and copied it out (a retain
    /// and a release of each of its references, ~450 instructions a one-task job).
    package init(policy: RetryPolicy, outputs: OutputUse = .all, entryStorage storage: consuming [Entry] = []) {
        storage.removeAllKeepingCapacity()
        self.policy = policy
        self.cancelling = false
        self.entries = storage
        self.tasks = []
        self.run = (0, 0, 0)
        self.places = [:]
        self.outstanding = 0
        self.unanswered = 0
        self.summary = JobSummary()
        self.outputs = outputs
    }

    /// The entries' storage, emptied, for the next job's ledger (``init(policy:outputs:entryStorage:)``);
    /// nothing when it is large (a big job's table is not kept alive after it). This ledger is then
    /// not to be used.
    package mutating func takeEntryStorage() -> [Entry] { Self.emptied(&self.entries) }

    /// The task list's storage, emptied, for the next job of the same caller (a ``tasks`` array made by
    /// the coordinator, not the caller's, which emptying would copy); nothing when it is large. This
    /// ledger is then not to be used.
    package mutating func takeTaskStorage() -> [ScanTask] { Self.emptied(&self.tasks) }

    /// `array`'s storage, emptied and moved out (`array` is left empty), unless it is over
    /// ``keptEntryCapacity``.
    private static func emptied<Element>(_ array: inout [Element]) -> [Element] {
        guard array.capacity <= Self.keptEntryCapacity else { return [] }
        var storage: [Element] = []
        swap(&storage, &array)
        storage.removeAllKeepingCapacity()
        return storage
    }

    /// Forgets every task, all of them final (none ``outstanding``), and keeps the rest: the
    /// ``summary`` and ``cancelling``, and the storage for the tasks added next. A job whose tasks
    /// run one after another (``Coordinator/runChain(_:next:)``) stays one job without its ledger
    /// growing by a task each; a result for a forgotten task is stale, as one for a task never in
    /// the job.
    package mutating func forgetFinished() {
        precondition(self.outstanding == 0, "forgetFinished() with tasks outstanding")
        self.entries.removeAllKeepingCapacity()
        self.tasks.removeAllKeepingCapacity()
        self.run = (0, 0, 0)
        if !self.places.isEmpty { self.places.removeAll(keepingCapacity: true) }
        self.unanswered = 0
    }

    /// The largest table ``takeEntryStorage()`` and ``takeTaskStorage()`` hand on.
    package static let keptEntryCapacity = 1_024

    /// The place of task `id` in ``tasks``, if it is in the job.
    package func index(of id: TaskID) -> Int? {
        if id.high == self.run.high, case let offset = id.low &- self.run.low, offset < UInt64(self.run.count) {
            return Int(offset)
        }
        guard !self.places.isEmpty, let place = self.places[id] else { return nil }
        return Int(place)
    }

    /// Records where `task` (new to the job) is: in the run of ids when it continues it, else in the table.
    private mutating func place(_ id: TaskID, at index: Int) {
        if self.run.count == index {
            if index == 0 {
                self.run = (id.high, id.low, 1)
                return
            }
            if id.high == self.run.high, id.low == self.run.low &+ UInt64(index) {
                self.run.count += 1
                return
            }
        }
        self.places[id] = UInt32(index)
    }

    /// Adds a task at attempt 1 (or its own attempt). Returns false for an id already in the job.
    package mutating func add(_ task: consuming ScanTask) -> Bool {
        guard self.index(of: task.id) == nil else { return false }
        self.place(task.id, at: self.tasks.count)
        self.entries.append(Entry(attempt: task.attempt))
        // Moved in (a chain's next task: copied in and the original destroyed cost ~140 instructions).
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
        // Each task's id and attempt read in place (`for task in tasks` copied every task out).
        let duplicate = tasks.withUnsafeBufferPointer { tasks -> TaskID? in
            for offset in tasks.indices {
                let id = tasks[offset].id
                guard self.index(of: id) == nil else { return id }
                self.place(id, at: base + offset)
                self.entries.append(Entry(attempt: tasks[offset].attempt))
            }
            return nil
        }
        if let duplicate { return duplicate }
        self.outstanding += tasks.count
        self.summary.tasks += tasks.count
        return nil
    }

    /// The task with this id, as submitted.
    package func task(_ id: TaskID) -> ScanTask? { self.index(of: id).map { self.tasks[$0] } }

    /// ``markSent(at:)``, and when the task is to be sent, calls `send` with it read in place (through
    /// the list's buffer, not copied out of it); returns whether it was sent. Mutating, so that a
    /// caller holding the ledger in a class's property reaches it in place: a non-mutating method
    /// called there copied the whole ledger (its three arrays retained and released, ~250
    /// instructions per first SUBMIT).
    package mutating func send(at index: Int, _ send: (UnsafePointer<ScanTask>) -> Void) -> Bool {
        guard self.markSent(at: index) else { return false }
        // A pointer to the task where it lies, valid during the call (the buffer's closure). Passed
        // as a value, even borrowed through `pointee`, the task was copied out first and destroyed
        // after (its kind and input retained and released: ~200 instructions a first SUBMIT);
        // through `&self.tasks[index]` the list's storage, shared with the caller's array, was
        // copied whole on the first SUBMIT.
        precondition(index >= 0 && index < self.tasks.count, "task \(index) of \(self.tasks.count)")
        self.tasks.withUnsafeBufferPointer { send($0.baseAddress!.advanced(by: index)) }
        return true
    }

    /// The broker said ACCEPTED. Returns true the first time for a task (a resend after a broker
    /// restart is accepted again, and must not count twice).
    package mutating func accepted(_ id: TaskID) -> Bool {
        guard let index = self.index(of: id), !self.entries[index].isAccepted else { return false }
        self.entries[index].isAccepted = true
        let entry = self.entries[index]
        if entry.isSent && !entry.isFinal { self.unanswered -= 1 }
        return true
    }

    /// The broker requeued a task after its worker was lost.
    package mutating func requeued(_ id: TaskID, attempt: UInt32) -> Bool {
        guard let index = self.index(of: id), !self.entries[index].isFinal, attempt > self.entries[index].attempt
        else { return false }
        self.entries[index].attempt = attempt
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
        let index: Int
        switch self.landing(of: id) {
        case .entry(let found): index = found
        case .duplicate: return .duplicate
        case .stale: return .stale
        }
        if case .completed(let output) = outcome {
            var result: FinalResult?
            let kept = self.outputs.keeps(self.tasks[index]) ? output : []
            self.complete(index, attempt: attempt, system: system, output: kept) { result = $0 }
            return .final(result.take()!)
        }
        guard attempt == self.entries[index].attempt else { return .stale }
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
                task: self.tasks[index],
                status: status,
                attempts: Int(attempt),
                system: system,
                error: reason,
                errorDetail: detail
            )
        }
        if self.cancelling {
            let exhausted = Int(attempt) >= self.policy.maxAttempts || placement == .none
            return self.finish(index, ended(exhausted && outcome != .cancelled ? .failed : .cancelled))
        }
        if Int(attempt) < self.policy.maxAttempts && placement != .none {
            self.entries[index].attempt = attempt + 1
            self.entries[index].isLocal = placement == .local
            self.summary.retried += 1
            var next = self.tasks[index]
            next.attempt = attempt + 1
            if placement == .local {
                self.summary.retriedLocally += 1
                return .retryLocal(next)
            }
            return .retryRemote(next)
        }
        return self.finish(index, ended(outcome == .cancelled ? .cancelled : .failed))
    }

    /// ``record(_:attempt:outcome:system:remoteAllowed:)`` for a completed attempt, with the final
    /// result handed to `final` instead of returned in a ``Decision``: returned in one, it was copied
    /// once more on its way to the job's events, with its task, system and output retained and
    /// released (~300 instructions per task). (The copy that remained, of the result as it was
    /// built, went with `FinalResult`'s optional field: see its `errorText`.) Returns a plain value
    /// too: an optional ``Decision`` was
    /// copied (as a nil) four times on the way. `output` is read where it lies (a RESULT's frame) and
    /// copied only into a final result that keeps it (``outputs``): a duplicate or stale one costs no
    /// array.
    package mutating func recordCompleted(
        _ id: TaskID,
        attempt: UInt32,
        system: String,
        output: UnsafeRawBufferPointer,
        _ final: (consuming FinalResult) -> Void
    ) -> Completion {
        switch self.landing(of: id) {
        case .entry(let index):
            let kept = self.outputs.keeps(self.tasks[index]) ? Array(output) : []
            self.complete(index, attempt: attempt, system: system, output: kept, final)
            return .final
        case .duplicate: return .duplicate
        case .stale: return .stale
        }
    }

    /// Where a result for task `id` lands: its entry, unless the task is unknown (stale) or already
    /// has its final result (a duplicate, counted here).
    private enum Landing {
        case entry(Int)
        case duplicate
        case stale
    }

    private mutating func landing(of id: TaskID) -> Landing {
        guard let index = self.index(of: id) else { return .stale }
        if self.entries[index].isFinal {
            self.summary.duplicates += 1
            return .duplicate
        }
        return .entry(index)
    }

    /// What ``recordCompleted(_:attempt:system:output:_:)`` did: handed the final result on, or
    /// found the result a duplicate or stale (as the ``Decision``s of those names).
    package enum Completion {
        case final
        case duplicate
        case stale
    }

    /// Ends the unfinished task at `index` as completed (any attempt's output counts).
    private mutating func complete(
        _ index: Int,
        attempt: UInt32,
        system: String,
        output: [UInt8],
        _ final: (consuming FinalResult) -> Void
    ) {
        self.end(index, .completed)
        final(
            FinalResult(
                task: self.tasks[index],
                status: .completed,
                attempts: Int(attempt),
                system: system,
                output: output
            )
        )
    }

    /// Whether `attempt` is still the task's current, unfinished attempt (a delayed retry checks this
    /// before it starts).
    package func isCurrent(_ id: TaskID, attempt: UInt32) -> Bool {
        guard let index = self.index(of: id) else { return false }
        return !self.entries[index].isFinal && self.entries[index].attempt == attempt
    }

    /// Ends a task without a result from anywhere (e.g. the broker rejected it).
    package mutating func fail(_ id: TaskID, reason: String, system: String) -> Decision {
        guard let index = self.index(of: id) else { return .stale }
        if self.entries[index].isFinal { return .duplicate }
        return self.finish(
            index,
            FinalResult(
                task: self.tasks[index],
                status: .failed,
                attempts: Int(self.entries[index].attempt),
                system: system,
                error: reason
            )
        )
    }

    /// The places of the tasks that are not final, in id order.
    private var unfinishedByID: [Int] {
        self.entries.indices.filter { !self.entries[$0].isFinal }.sorted { self.tasks[$0].id < self.tasks[$1].id }
    }

    /// Starts cancelling the job: no more retries. Returns the tasks whose current attempt is at the
    /// broker (to cancel there) and ends every local one at once as cancelled (its running scan's
    /// result will be stale).
    package mutating func cancel(reason: String) -> (remote: [TaskID], finals: [FinalResult]) {
        self.cancelling = true
        var remote: [TaskID] = []
        var finals: [FinalResult] = []
        for index in self.unfinishedByID {
            let entry = self.entries[index]
            if entry.isLocal {
                let result = FinalResult(
                    task: self.tasks[index],
                    status: .cancelled,
                    attempts: Int(entry.attempt),
                    system: "local",
                    error: reason
                )
                if case .final(let final) = self.finish(index, result) { finals.append(final) }
            } else {
                remote.append(self.tasks[index].id)
            }
        }
        return (remote, finals)
    }

    /// Ends every task that is still not final as cancelled (the broker did not answer its CANCEL in
    /// time).
    package mutating func cancelRemaining(reason: String) -> [FinalResult] {
        var finals: [FinalResult] = []
        for index in self.unfinishedByID {
            let entry = self.entries[index]
            let result = FinalResult(
                task: self.tasks[index],
                status: .cancelled,
                attempts: Int(entry.attempt),
                system: entry.isLocal ? "local" : "broker",
                error: reason
            )
            if case .final(let final) = self.finish(index, result) { finals.append(final) }
        }
        return finals
    }

    /// Takes the result (consumed, so that it moves into the decision without a copy).
    private mutating func finish(_ index: Int, _ result: consuming FinalResult) -> Decision {
        self.end(index, result.status)
        if result.status == .failed { self.summary.deadLetters.append(copy result) }
        return .final(result)
    }

    /// Marks the entry at `index` final and counts how it ended.
    private mutating func end(_ index: Int, _ status: FinalResult.Status) {
        self.entries[index].isFinal = true
        self.outstanding -= 1
        if self.entries[index].isSent && !self.entries[index].isAccepted { self.unanswered -= 1 }
        switch status {
        case .completed: self.summary.completed += 1
        case .failed: self.summary.failed += 1
        case .cancelled: self.summary.cancelled += 1
        }
    }

    /// Marks a task's first SUBMIT as sent. Returns false when it needs none any more (it is final,
    /// or runs locally since the broker was lost).
    package mutating func markSent(_ id: TaskID) -> Bool {
        guard let index = self.index(of: id) else { return false }
        return self.markSent(at: index)
    }

    /// ``markSent(_:)`` for the task at `index` in ``tasks`` (the coordinator sends them in order).
    package mutating func markSent(at index: Int) -> Bool {
        let entry = self.entries[index]
        guard !entry.isFinal, !entry.isLocal, !entry.isSent else { return false }
        self.entries[index].isSent = true
        self.unanswered += 1
        return true
    }

    /// The broker refused a task for want of room (its queue, or this coordinator's share of it):
    /// the task counts as not sent, to go again later. False when it is not a first SUBMIT still
    /// unanswered (a retry, or a task already accepted, final or local).
    package mutating func unsend(_ id: TaskID) -> Bool {
        guard let index = self.index(of: id), case let entry = self.entries[index], entry.isSent, !entry.isAccepted,
            !entry.isFinal, !entry.isLocal, !self.cancelling
        else { return false }
        self.entries[index].isSent = false
        self.unanswered -= 1
        return true
    }

    /// Whether the task's first SUBMIT has gone out.
    package func isSent(_ id: TaskID) -> Bool { self.index(of: id).map { self.entries[$0].isSent } ?? false }

    /// Tasks that are not final, whose current attempt is at the broker, and that were sent, in id
    /// order.
    package var unfinishedRemoteTasks: [ScanTask] {
        self.unfinishedByID.filter { !self.entries[$0].isLocal && self.entries[$0].isSent }.map { index in
            var task = self.tasks[index]
            task.attempt = self.entries[index].attempt
            return task
        }
    }

    /// Tasks that are not final and whose current attempt is at the broker: (id, attempt).
    package var unfinishedRemote: [(TaskID, UInt32)] {
        self.unfinishedByID.filter { !self.entries[$0].isLocal }.map { (self.tasks[$0].id, self.entries[$0].attempt) }
    }

    package func currentAttempt(_ id: TaskID) -> UInt32? { self.index(of: id).map { self.entries[$0].attempt } }
}

/// Which completed results carry their output to a job's caller.
package enum OutputUse: Sendable, Equatable {
    /// Every result's (the default).
    case all
    /// Only the results of tasks of this kind; the others' output is left in their RESULTs.
    case onlyOfKind(String)

    /// Whether `task`'s result keeps its output.
    func keeps(_ task: borrowing ScanTask) -> Bool {
        switch self {
        case .all: true
        case .onlyOfKind(let kind): task.kind == kind
        }
    }
}
