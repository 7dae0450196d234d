/// One unit of work: a kind (which ``TaskScanner`` runs it) and opaque input bytes.
///
/// The book's `ScanTask` had a sector number as its input; here the input is bytes so any scanner
/// fits, and ``sector(_:work:failEvery:)`` builds the book's kind.
public struct ScanTask: Sendable, Identifiable, Equatable {
    /// Unique within a job (a new UUID by default).
    public var id: TaskID
    /// Which scanner runs it, e.g. `"sector"`.
    public var kind: String
    /// The scanner's input, opaque to the broker.
    public var input: [UInt8]
    /// 1 for the first attempt, +1 for each retry or requeue.
    public var attempt: UInt32
    /// Higher runs first.
    public var priority: Int32
    /// Per-attempt time limit; nil for none.
    public var timeout: Duration?
    /// Attempts allowed in all (remote and local).
    public var maxAttempts: Int

    /// The largest ``input`` a task may carry: one message is at most 16 MiB (`ZMQ_MAXMSGSIZE`, which
    /// makes libzmq drop a peer that sends more, in silence), less 64 KiB for the envelope.
    public static let maxInputBytes = Int(ProtocolLimits.maxMessageSize) - (64 << 10)

    /// A task; the envelope fields have their defaults.
    public init(
        id: TaskID = .random(),
        kind: String,
        input: [UInt8],
        attempt: UInt32 = 1,
        priority: Int32 = 0,
        timeout: Duration? = nil,
        maxAttempts: Int = 3
    ) {
        self.id = id
        self.kind = kind
        self.input = input
        self.attempt = attempt
        self.priority = priority
        self.timeout = timeout
        self.maxAttempts = maxAttempts
    }

    /// Which attempt of which task a scan is running (``ScanContext/task``).
    public struct Reference: Sendable, Equatable {
        /// The task.
        public var id: TaskID
        /// Its attempt, 1 for the first.
        public var attempt: UInt32
        /// The ScanSystem running it ("worker-a", "local").
        public var system: String
        /// The slot it runs in, 0..<slots.
        public var slot: Int

        /// A reference to one attempt of a task.
        public init(id: TaskID, attempt: UInt32, system: String, slot: Int) {
            self.id = id
            self.attempt = attempt
            self.system = system
            self.slot = slot
        }
    }

    package var envelope: TaskEnvelope {
        TaskEnvelope(
            kind: self.kind,
            priority: self.priority,
            timeoutMilliseconds: self.timeout.map { UInt32(clamping: $0.milliseconds) } ?? 0,
            maxAttempts: UInt16(clamping: self.maxAttempts)
        )
    }

    package init(id: TaskID, attempt: UInt32, envelope: TaskEnvelope, input: [UInt8]) {
        self.init(
            id: id,
            kind: envelope.kind,
            input: input,
            attempt: attempt,
            priority: envelope.priority,
            timeout: envelope.timeoutMilliseconds == 0 ? nil : .milliseconds(envelope.timeoutMilliseconds),
            maxAttempts: Int(envelope.maxAttempts)
        )
    }
}
