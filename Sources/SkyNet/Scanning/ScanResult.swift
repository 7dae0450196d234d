/// How one attempt of a task ended.
public enum ScanOutcome: Sendable, Equatable {
    case completed([UInt8])
    case failed(String)
    case timedOut
    case cancelled

    var status: ResultStatus {
        switch self {
        case .completed: .completed
        case .failed: .failed
        case .timedOut: .timedOut
        case .cancelled: .cancelled
        }
    }

    /// The RESULT body: the output, or the error text.
    var body: [UInt8] {
        switch self {
        case .completed(let output): output
        case .failed(let reason): Array(reason.utf8)
        case .timedOut: Array("timed out".utf8)
        case .cancelled: Array("cancelled".utf8)
        }
    }

    init(status: ResultStatus, body: [UInt8]) {
        switch status {
        case .completed: self = .completed(body)
        case .failed: self = .failed(String(decoding: body, as: UTF8.self))
        case .timedOut: self = .timedOut
        case .cancelled: self = .cancelled
        }
    }
}

/// The outcome of one attempt of a ``ScanTask`` (the book's `TaskResponse`).
public struct ScanResult: Sendable, Equatable {
    /// The task.
    public var id: TaskID
    /// The attempt (1 = first try).
    public var attempt: UInt32
    /// How it ended.
    public var outcome: ScanOutcome
    /// The ScanSystem that ran it: a worker's name, or "local".
    public var system: String
    /// How long the scan ran.
    public var duration: Duration
    /// The slot it ran in, 0..<slots.
    public var slot: Int
    /// How many scans were running in that system when it started, itself included.
    public var busy: Int

    /// A result.
    public init(
        id: TaskID,
        attempt: UInt32,
        outcome: ScanOutcome,
        system: String,
        duration: Duration = .zero,
        slot: Int = 0,
        busy: Int = 0
    ) {
        self.id = id
        self.attempt = attempt
        self.outcome = outcome
        self.system = system
        self.duration = duration
        self.slot = slot
        self.busy = busy
    }

    var meta: ResultMeta {
        ResultMeta(
            system: self.system,
            durationMicroseconds: UInt32(clamping: self.duration.microseconds),
            slot: UInt16(clamping: self.slot),
            busy: UInt16(clamping: self.busy)
        )
    }
}
