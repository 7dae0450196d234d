/// The one final result a task gets at its coordinator.
public struct FinalResult: Sendable, Equatable {
    /// How a task ended.
    public enum Status: String, Sendable {
        case completed, failed, cancelled
    }

    /// The task as submitted.
    public var task: ScanTask
    /// How it ended.
    public var status: Status
    /// The number of the attempt that ended it (1 = first try).
    public var attempts: Int
    /// The ScanSystem of the final attempt ("worker-a", "local", or "broker" when the broker gave up).
    public var system: String
    /// The output, when completed.
    public var output: [UInt8]
    /// The last error, when failed or cancelled.
    public var error: String? {
        get { self.hasError ? self.errorText : nil }
        set { (self.errorText, self.hasError) = if let newValue { (newValue, true) } else { ("", false) } }
    }
    /// ``error``, kept as a String and a flag rather than an optional: with an optional String among
    /// its fields, every `FinalResult` the initializer made was copied whole and the original
    /// destroyed (the optimizer does not see through an optional field of a struct built field by
    /// field: a retain and a release of each reference, ~320 instructions a result at `skynet
    /// submit`). A test checks that `error` reads back what it was given.
    private var errorText: String
    package private(set) var hasError: Bool
    /// The last error's detail bytes (a ``ScannerError``'s `detail`: for `exec`, the exit status and
    /// output), empty when it had none.
    public var errorDetail: [UInt8]

    /// A final result.
    public init(
        task: ScanTask,
        status: Status,
        attempts: Int,
        system: String,
        output: [UInt8] = [],
        error: String? = nil,
        errorDetail: [UInt8] = []
    ) {
        self.task = task
        self.status = status
        self.attempts = attempts
        self.system = system
        self.output = output
        (self.errorText, self.hasError) = if let error { (error, true) } else { ("", false) }
        self.errorDetail = errorDetail
    }

    /// The output as text (lossy for non-UTF-8 output).
    public var outputText: String { String(decoding: self.output, as: UTF8.self) }
}

/// What happens to a job, delivered in batches by ``Coordinator/submit(_:)``.
public enum CoordinatorEvent: Sendable, Equatable {
    /// The broker queued this many more of the job's tasks.
    case accepted(count: Int)
    /// A task's worker was lost; the broker queued it again as `attempt`.
    case requeued(ScanTask, attempt: UInt32)
    /// An attempt failed and the task runs again (`placement` is where) after `delay` (the backoff).
    case retrying(
        ScanTask,
        failedAttempt: UInt32,
        system: String,
        reason: String,
        placement: RetryPolicy.Placement,
        delay: Duration
    )
    /// The task's one final result.
    case final(FinalResult)
    /// The broker has been silent too long; unfinished remote attempts now count as failed.
    case brokerLost(reason: String)
    /// The job is being cancelled (`reason`, e.g. "interrupted"): queued and running tasks are
    /// cancelled, and every task not final yet ends as cancelled.
    case cancelling(reason: String)
    /// The broker restarted (its epoch changed) or had forgotten this coordinator; the job's
    /// unfinished remote tasks were sent again.
    case resubmitted(count: Int, reason: String)
    /// A second into the job, no registered worker serves `kind`: its tasks wait at the broker until
    /// one does.
    case noWorker(kind: String)
    /// The broker refused tasks for want of room (`reason`: its `--max-queued-per-coordinator`, or a
    /// full queue): the rest are sent as the job's tasks leave it, none fails for it.
    case slowedDown(reason: String)
}

/// Totals for one job.
public struct JobSummary: Sendable, Equatable {
    /// Tasks in the job.
    public var tasks = 0
    /// Tasks that completed.
    public var completed = 0
    /// Tasks that failed every attempt.
    public var failed = 0
    /// Tasks cancelled.
    public var cancelled = 0
    /// Attempts re-run by the retry policy (locally or remotely).
    public var retried = 0
    /// Of those, re-run on the coordinator's local ScanSystem.
    public var retriedLocally = 0
    /// Tasks requeued by the broker after their worker was lost.
    public var requeued = 0
    /// Results for tasks that already had their final result (dropped).
    public var duplicates = 0
    /// Tasks answered by a ``ResultCache`` without running (counted in ``tasks`` and ``completed``).
    public var fromCache = 0
    /// Tasks identical to another of the job (the same ``CacheKey``), which took that task's result
    /// instead of running again (counted in ``tasks`` and by their status).
    public var identical = 0
    /// Completed results that an output could not record: the ``ResultCache`` (counted here by the
    /// coordinator) or the caller's own (a job log, a results directory). Each is an error to report.
    public var notRecorded = 0
    /// Why the first result was not recorded, per output (`"--cache"`: `No space left on device`).
    public var recordErrors: [String: String] = [:]
    /// From the submit to the last final result.
    public var wall: Duration = .zero
    /// The final results of tasks that failed (exhausted their attempts, or were rejected), in the
    /// order they failed: the dead-letter report.
    public var deadLetters: [FinalResult] = []

    /// An empty summary.
    public init() {}

    /// Final results per second of wall time.
    public var tasksPerSecond: Double {
        let seconds = self.wall.seconds
        return seconds > 0 ? Double(self.completed + self.failed + self.cancelled) / seconds : 0
    }

    /// Every task completed.
    public var succeeded: Bool { self.completed == self.tasks }

    /// Tasks that did not complete (failed or cancelled).
    public var notCompleted: Int { self.tasks - self.completed }

    /// What a job's exit status counts: the tasks that did not complete, and the completed ones whose
    /// result an output could not record (at most every task).
    public var notDelivered: Int { min(self.tasks, self.notCompleted + self.notRecorded) }

    /// What a job's exit status counts: ``notDelivered``, and at least 1 when an output failed at all
    /// (a reason in ``recordErrors``), even one that lost no result (it failed on the summary).
    public var failures: Int { max(self.notDelivered, self.recordErrors.isEmpty ? 0 : 1) }

    /// Adds `other`'s unrecorded results and their reasons (the first reason per output stays).
    public mutating func addRecordFailures(of other: JobSummary) {
        self.notRecorded += other.notRecorded
        self.recordErrors.merge(other.recordErrors) { first, _ in first }
    }

    /// Counts `count` completed results that `output` could not record, and the first reason.
    public mutating func recordFailed(_ count: Int, output: String, reason: String) {
        self.notRecorded += count
        if self.recordErrors[output] == nil { self.recordErrors[output] = reason }
    }

    /// The final results that came from a cache or an identical task, added to this summary.
    package mutating func add(_ result: FinalResult, fromCache: Bool) {
        self.tasks += 1
        switch result.status {
        case .completed: self.completed += 1
        case .failed:
            self.failed += 1
            self.deadLetters.append(result)
        case .cancelled: self.cancelled += 1
        }
        if fromCache { self.fromCache += 1 } else { self.identical += 1 }
    }

    /// This summary with `other`'s task counts added (a cached job's extra results).
    package func merging(_ other: JobSummary) -> JobSummary {
        var merged = self
        merged.tasks += other.tasks
        merged.completed += other.completed
        merged.failed += other.failed
        merged.cancelled += other.cancelled
        merged.fromCache += other.fromCache
        merged.identical += other.identical
        merged.deadLetters += other.deadLetters
        merged.addRecordFailures(of: other)
        return merged
    }
}
