import Glibc

/// A journal error: the path cannot be opened or read (the broker does not start), or a write or
/// sync failed while it ran (the broker stops at once: ``Code/diskFailure``).
public struct JournalError: Error, Sendable, CustomStringConvertible {
    /// What went wrong; more codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        package let name: String
        /// The journal cannot be opened, read or locked (another broker holds it), or its writer
        /// thread cannot start: the broker does not start.
        public static let unavailable = Code(name: "unavailable")
        /// A write or sync failed while the broker ran. What is on disk is consistent up to the last
        /// commit and nothing after it was acknowledged; the broker has stopped (the `skynet broker`
        /// command exits 74, as sysexits' EX_IOERR). Restart it on the same journal once the disk
        /// is fixed.
        public static let diskFailure = Code(name: "disk failure")
        /// The code's name.
        public var description: String { self.name }
    }

    /// What went wrong.
    public package(set) var code: Code
    /// What happened, naming the path.
    public let message: String

    package init(_ message: String, code: Code = .unavailable) {
        self.message = message
        self.code = code
    }

    package init(_ operation: String, path: String, errno code: Int32) {
        self.init("\(operation) \(path): \(String(cString: strerror(code)))")
    }

    /// The message.
    public var description: String { self.message }
}

/// One record of the broker's journal (DESIGN.md §8). Replaying the records in order rebuilds what
/// the broker must not lose: accepted tasks that have no result yet, and results not yet claimed.
package enum JournalRecord: Equatable {
    /// A task was accepted (or submitted again for a new attempt).
    case submit(TaskID, coordinator: PeerID, attempt: UInt32, TaskEnvelope, input: [UInt8])
    /// A lost worker's task was queued again as `attempt`.
    case attempt(TaskID, UInt32)
    /// An attempt's RESULT, as forwarded to the coordinator (its wire frames, header first).
    case result(TaskID, coordinator: PeerID, frames: [[UInt8]])
    /// The broker is done with a task without a result to keep (cancelled, its coordinator lost,
    /// failed by the broker, or its stored result claimed).
    case forget(TaskID)
    /// A detached job belongs to this key (a CURVE public key, Z85): only it may read or cancel it.
    case jobOwner(job: TaskID, key: String)
    /// A detached job's name (`skynet submit --name`), for `skynet jobs`, status and the dashboard.
    case jobName(job: TaskID, name: String)
    /// A stored result was sent to its coordinator (HA mode, whose journal keeps a result until it
    /// is told to forget it): as ``forget(_:)``, for a task that has a result and nothing else.
    case delivered(TaskID)

    private enum Kind: UInt8 {
        case submit = 1
        case attempt = 2
        case result = 3
        case forget = 4
        case jobOwner = 5
        case jobName = 6
        case delivered = 7
    }

    /// The record framed for the file: length (u32), CRC-32 of the payload (u32), payload.
    package func framed() -> [UInt8] {
        var payload = ByteWriter(capacity: 64)
        switch self {
        case .submit(let id, let coordinator, let attempt, let envelope, let input):
            payload.u8(Kind.submit.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
            coordinator.withUnsafeBytes { payload.blob($0) }
            payload.u32(attempt)
            payload.blob(envelope.encode())
            payload.blob(input)
        case .attempt(let id, let attempt):
            payload.u8(Kind.attempt.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
            payload.u32(attempt)
        case .result(let id, let coordinator, let frames):
            payload.u8(Kind.result.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
            coordinator.withUnsafeBytes { payload.blob($0) }
            payload.u16(UInt16(frames.count))
            for frame in frames { payload.blob(frame) }
        case .forget(let id):
            payload.u8(Kind.forget.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
        case .delivered(let id):
            payload.u8(Kind.delivered.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
        case .jobOwner(let job, let key):
            payload.u8(Kind.jobOwner.rawValue)
            payload.bytes.append(contentsOf: job.bytes)
            payload.blob(Array(key.utf8))
        case .jobName(let job, let name):
            payload.u8(Kind.jobName.rawValue)
            payload.bytes.append(contentsOf: job.bytes)
            payload.blob(Array(name.utf8))
        }
        return RecordFraming.frame(payload.bytes)
    }

    /// A record's coordinator: a routing id (at most 255 bytes), or an error for a record that holds
    /// none (a damaged journal, or one past the table of long routing ids, ``PeerID/LongIDs``).
    private static func peer(_ bytes: [UInt8]) throws(ProtocolError) -> PeerID {
        guard let peer = bytes.withUnsafeBytes({ PeerID(received: $0) }) else {
            throw ProtocolError(
                .invalidValue,
                "journal record has a coordinator id that cannot be kept (\(bytes.count) bytes)"
            )
        }
        return peer
    }

    /// Decodes one payload (after its length and CRC were checked).
    package static func decode(_ payload: ArraySlice<UInt8>) throws(ProtocolError) -> JournalRecord {
        var reader = ByteReader(payload, what: "journal record")
        let kind = Kind(rawValue: try reader.u8())
        let id = TaskID(bytes: try reader.fixed(16))
        let record: JournalRecord
        switch kind {
        case .submit:
            let coordinator = try Self.peer(try reader.blob())
            let attempt = try reader.u32()
            let envelope = try TaskEnvelope.decode(try reader.blob())
            record = .submit(id, coordinator: coordinator, attempt: attempt, envelope, input: try reader.blob())
        case .attempt:
            record = .attempt(id, try reader.u32())
        case .result:
            let coordinator = try Self.peer(try reader.blob())
            let count = Int(try reader.u16())
            var frames: [[UInt8]] = []
            for _ in 0..<count { frames.append(try reader.blob()) }
            record = .result(id, coordinator: coordinator, frames: frames)
        case .forget:
            record = .forget(id)
        case .delivered:
            record = .delivered(id)
        case .jobOwner:
            record = .jobOwner(job: id, key: String(decoding: try reader.blob(), as: UTF8.self))
        case .jobName:
            record = .jobName(job: id, name: String(decoding: try reader.blob(), as: UTF8.self))
        case nil:
            throw ProtocolError(.invalidValue, "unknown journal record kind")
        }
        try reader.finish()
        return record
    }
}

/// What a journal held when it was opened: the broker queues `pending` again and keeps `results`
/// for their coordinators.
package struct JournalRecovery {
    package struct Pending {
        package let id: TaskID
        package let coordinator: PeerID
        package var attempt: UInt32
        package let envelope: TaskEnvelope
        package let input: [UInt8]
        package let order: Int
    }

    package struct StoredResult {
        package let coordinator: PeerID
        package let frames: [[UInt8]]
    }

    /// Accepted tasks without a result, in the order they were first accepted.
    package var pending: [Pending] = []
    package var results: [TaskID: StoredResult] = [:]
    /// The key each detached job belongs to (CURVE).
    package var jobOwners: [TaskID: String] = [:]
    /// Each named detached job's name.
    package var jobNames: [TaskID: String] = [:]
    /// Records read.
    package var records = 0
    /// Bytes of a torn or corrupt tail that were cut off.
    package var droppedBytes = 0
    package var fileBytes = 0

    /// Replays records in order.
    package static func replay(_ records: [JournalRecord]) -> JournalRecovery {
        var pending: [TaskID: Pending] = [:]
        var results: [TaskID: StoredResult] = [:]
        var owners: [TaskID: String] = [:]
        var names: [TaskID: String] = [:]
        for (order, record) in records.enumerated() {
            switch record {
            case .submit(let id, let coordinator, let attempt, let envelope, let input):
                results[id] = nil
                let first = pending[id]?.order ?? order
                pending[id] = Pending(
                    id: id,
                    coordinator: coordinator,
                    attempt: attempt,
                    envelope: envelope,
                    input: input,
                    order: first
                )
            case .attempt(let id, let attempt):
                pending[id]?.attempt = attempt
            case .result(let id, let coordinator, let frames):
                pending[id] = nil
                results[id] = StoredResult(coordinator: coordinator, frames: frames)
            case .forget(let id), .delivered(let id):
                pending[id] = nil
                results[id] = nil
            case .jobOwner(let job, let key):
                owners[job] = key
            case .jobName(let job, let name):
                names[job] = name
            }
        }
        var recovery = JournalRecovery()
        recovery.jobOwners = owners
        recovery.jobNames = names
        recovery.pending = pending.values.sorted { $0.order < $1.order }
        recovery.results = results
        recovery.records = records.count
        return recovery
    }
}
