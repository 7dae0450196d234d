/// What a coordinator says of its running job with each heartbeat (FIGURES on the frontend), so the
/// broker's dashboard shows live jobs as the coordinator sees them: its total, its final results
/// (local retries and cache hits included), and its dead letters.
public struct JobFigures: Sendable, Codable, Equatable {
    /// A task that failed every attempt, with its last error.
    public struct DeadLetter: Sendable, Codable, Equatable {
        public var task: String
        public var error: String

        public init(task: String, error: String) {
            self.task = task
            self.error = error
        }
    }

    /// Tells one job of a coordinator from its next.
    public var serial: Int
    /// What the job is (`skynet submit` says what it submits; Swift code may name it).
    public var name: String
    /// Tasks in the job.
    public var tasks: Int
    /// Of those, with their final result: completed, failed every attempt, cancelled.
    public var completed: Int
    public var failed: Int
    public var cancelled: Int
    /// Answered from a result cache without running.
    public var fromCache: Int
    /// Attempts run again by the retry policy.
    public var retried: Int
    /// Seconds since the job was submitted.
    public var elapsedSeconds: Double
    /// The last few dead letters (at most ``maxDeadLetters``).
    public var deadLetters: [DeadLetter]

    /// Dead letters a report carries, and the longest error each keeps (in UTF-8 bytes).
    public static let maxDeadLetters = 5
    package static let maxErrorLength = 240

    /// Every task has its final result.
    public var finished: Bool { self.completed + self.failed + self.cancelled >= self.tasks }

    public init(
        serial: Int,
        name: String,
        tasks: Int,
        completed: Int,
        failed: Int,
        cancelled: Int,
        fromCache: Int = 0,
        retried: Int = 0,
        elapsedSeconds: Double = 0,
        deadLetters: [DeadLetter] = []
    ) {
        self.serial = serial
        self.name = name
        self.tasks = tasks
        self.completed = completed
        self.failed = failed
        self.cancelled = cancelled
        self.fromCache = fromCache
        self.retried = retried
        self.elapsedSeconds = elapsedSeconds
        self.deadLetters = deadLetters
    }

    package enum CodingKeys: String, CodingKey {
        case serial, name, tasks, completed, failed, cancelled, retried
        case fromCache
        case elapsedSeconds
        case deadLetters
    }

    /// A job's figures from its summary.
    package init(serial: Int, name: String, summary: JobSummary) {
        self.init(
            serial: serial,
            name: name,
            tasks: summary.tasks,
            completed: summary.completed,
            failed: summary.failed,
            cancelled: summary.cancelled,
            fromCache: summary.fromCache,
            retried: summary.retried,
            elapsedSeconds: summary.wall.seconds,
            deadLetters: summary.deadLetters.suffix(Self.maxDeadLetters).map {
                DeadLetter(task: "\($0.task.id)", error: $0.error ?? "failed")
            }
        )
    }

    /// Version 1: u8 1, u32 serial, name, u64 tasks, completed, failed, cancelled, from cache,
    /// retried, u64 elapsed milliseconds, u8 dead letters, each a 16-byte task id and its error.
    package func encode() -> [UInt8] {
        var out = ByteWriter(capacity: 96 + self.name.utf8.count)
        out.u8(1)
        out.u32(UInt32(truncatingIfNeeded: self.serial))
        out.string(self.name.prefix(utf8Bytes: ProtocolLimits.nameLength))
        for value in [self.tasks, self.completed, self.failed, self.cancelled, self.fromCache, self.retried] {
            out.u64(UInt64(clamping: value))
        }
        out.u64(UInt64(clamping: Int64((self.elapsedSeconds * 1000).rounded())))
        let letters = self.deadLetters.suffix(Self.maxDeadLetters)
        out.u8(UInt8(letters.count))
        for letter in letters {
            out.bytes += (TaskID(letter.task) ?? .zero).bytes
            out.string(letter.error.prefix(utf8Bytes: Self.maxErrorLength))
        }
        return out.bytes
    }

    package static func decode<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes) throws(ProtocolError) -> JobFigures
    where Bytes.Index == Int {
        var reader = ByteReader(bytes, what: "job FIGURES")
        guard try reader.u8() == 1 else { throw ProtocolError(.invalidValue, "job FIGURES version is not 1") }
        let serial = Int(try reader.u32())
        let name = try reader.string(maxLength: ProtocolLimits.nameLength, field: "job name")
        var counts: [Int] = []
        for _ in 0..<6 { counts.append(Int(clamping: try reader.u64())) }
        let elapsed = Double(try reader.u64()) / 1000
        let count = Int(try reader.u8())
        guard count <= Self.maxDeadLetters else {
            throw ProtocolError(.invalidValue, "job FIGURES has \(count) dead letters, at most \(Self.maxDeadLetters)")
        }
        var letters: [DeadLetter] = []
        for _ in 0..<count {
            let id = TaskID(bytes: try reader.fixed(16))
            letters.append(
                DeadLetter(task: "\(id)", error: try reader.string(maxLength: Self.maxErrorLength, field: "error"))
            )
        }
        try reader.finish()
        return JobFigures(
            serial: serial,
            name: name,
            tasks: counts[0],
            completed: counts[1],
            failed: counts[2],
            cancelled: counts[3],
            fromCache: counts[4],
            retried: counts[5],
            elapsedSeconds: elapsed,
            deadLetters: letters
        )
    }
}
