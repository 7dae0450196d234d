/// A broker's account of a detached job, sent in a JOB reply (as JSON) and printed by
/// `skynet results` and `skynet cancel`.
public struct DetachedJobStatus: JSONLine, Sendable, Equatable {
    /// The job's id.
    public var job: String
    /// Tasks the broker knows for the job: finished and pending.
    public var tasks: Int
    /// Tasks that completed.
    public var completed: Int
    /// Tasks that failed every attempt.
    public var failed: Int
    /// Tasks cancelled.
    public var cancelled: Int
    /// Tasks still queued or running.
    public var pending: Int
    /// The ids of the first pending tasks (at most 100).
    public var pendingIDs: [String]
    /// The job is being cancelled.
    public var cancelling: Bool
    /// Set when the broker cannot answer (unknown job, not a durable broker).
    public var error: String?

    /// Tasks with their final result.
    public var finished: Int { self.completed + self.failed + self.cancelled }
    /// Every task the broker knows has its final result.
    public var done: Bool { self.error == nil && self.pending == 0 }

    package enum CodingKeys: String, CodingKey {
        case job, tasks, completed, failed, cancelled, pending, cancelling, error
        case pendingIDs = "pendingIds"  // "pending_ids" in snake case (not "pending_i_ds")
    }

    /// A status; `error` set means the broker could not answer.
    public init(
        job: String,
        tasks: Int = 0,
        completed: Int = 0,
        failed: Int = 0,
        cancelled: Int = 0,
        pending: Int = 0,
        pendingIDs: [String] = [],
        cancelling: Bool = false,
        error: String? = nil
    ) {
        self.job = job
        self.tasks = tasks
        self.completed = completed
        self.failed = failed
        self.cancelled = cancelled
        self.pending = pending
        self.pendingIDs = pendingIDs
        self.cancelling = cancelling
        self.error = error
    }

}
