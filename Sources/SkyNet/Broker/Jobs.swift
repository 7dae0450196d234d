/// A broker's account of a detached job, sent in a JOB reply (as JSON) and printed by
/// `skynet results` and `skynet cancel`.
public struct JobStatus: JSONLine, Sendable, Equatable {
    /// The job's id.
    public var job: String
    /// Tasks the broker knows for the job: finished and pending.
    public var tasks: Int
    public var completed: Int
    public var failed: Int
    public var cancelled: Int
    /// Tasks still queued or running.
    public var pending: Int
    /// The ids of the first pending tasks (at most 100).
    public var pendingIDs: [String]
    /// The job is being cancelled.
    public var cancelling: Bool
    /// Set when the broker cannot answer (unknown job, not a durable broker).
    public var error: String?

    public var finished: Int { self.completed + self.failed + self.cancelled }
    /// Every task the broker knows has its final result.
    public var done: Bool { self.error == nil && self.pending == 0 }

    enum CodingKeys: String, CodingKey {
        case job, tasks, completed, failed, cancelled, pending, cancelling, error
        case pendingIDs = "pending_ids"
    }

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

/// What a durable broker keeps for a detached job: its final results (as encoded JOB result
/// frames, in the order they were committed), the kind and input of its unfinished tasks (to build
/// those results; a task stays here until its result is on disk, so these are the pending ones), and
/// who follows it.
struct JobRecord {
    var results: [TaskID: [[UInt8]]] = [:]
    var order: [TaskID] = []
    var inputs: [TaskID: (kind: String, input: [UInt8])] = [:]
    var completed = 0
    var failed = 0
    var cancelled = 0
    var followers: Set<PeerID> = []
    var cancelling = false
    var lastActivity: ContinuousClock.Instant

    init(now: ContinuousClock.Instant) { self.lastActivity = now }

    /// Records a final result's frames (a JOB result message). Returns false for a task that has one.
    mutating func store(_ id: TaskID, frames: [[UInt8]], now: ContinuousClock.Instant) -> Bool {
        guard self.results[id] == nil else { return false }
        self.results[id] = frames
        self.order.append(id)
        self.inputs[id] = nil
        self.lastActivity = now
        switch Self.status(of: frames) {
        case .completed: self.completed += 1
        case .cancelled: self.cancelled += 1
        default: self.failed += 1
        }
        return true
    }

    /// The RESULT status inside JOB result frames.
    static func status(of frames: [[UInt8]]) -> ResultStatus? {
        guard frames.count > 2, let header = try? Header.decode(frames[2]) else { return nil }
        return ResultStatus(rawValue: header.arg)
    }
}

extension PeerID {
    /// The owner of a detached job's tasks at the broker. It starts with a zero byte, which a
    /// ZeroMQ peer's routing id never does, so it cannot be confused with a connected coordinator.
    static func job(_ id: TaskID) -> PeerID { PeerID([0] + id.bytes) }

    /// The job this peer stands for, when it is a job's owner.
    var job: TaskID? {
        guard self.bytes.count == 17, self.bytes[0] == 0 else { return nil }
        return TaskID(bytes: Array(self.bytes[1...]))
    }
}
