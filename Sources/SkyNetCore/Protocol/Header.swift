/// The commands of wire protocol v1 (DESIGN.md §4).
package enum Command: UInt8, Sendable, CaseIterable {
    /// worker → broker: I am here; arg = capacity (slots).
    case ready = 1
    /// any direction: liveness; arg = the sender's epoch (a broker's changes when it restarts).
    case heartbeat = 2
    /// any direction: going away, or "you are unknown"; arg = ``DisconnectReason``.
    case disconnect = 3
    /// coordinator → broker: queue a task.
    case submit = 4
    /// broker → coordinator: the task is queued (again, with flag ``Header/requeuedFlag``).
    case accepted = 5
    /// broker → coordinator: the task was refused; arg = ``RejectReason``.
    case rejected = 6
    /// broker → worker: run a task; uses one credit.
    case task = 7
    /// worker → broker → coordinator: one attempt's outcome; arg = ``ResultStatus``; returns one credit.
    case result = 8
    /// worker → broker → coordinator: partial output of a long task.
    case progress = 9
    /// coordinator → broker → worker: cancel a queued or running task.
    case cancel = 10
    /// coordinator → broker (arg 0): request a snapshot; broker → coordinator (arg 1): the snapshot.
    case status = 11
    /// client ↔ broker: detached jobs; arg = ``JobOp``.
    case job = 12
    /// any direction: several messages for the same peer in one; arg = how many (see ``Batch``).
    case batch = 13
    /// worker → broker, with each heartbeat: its own figures (``WorkerFigures``).
    case figures = 14

    /// Whether the command concerns one task (non-zero task id) rather than the connection.
    package var isTaskCommand: Bool {
        switch self {
        case .ready, .heartbeat, .disconnect, .status, .job, .batch, .figures: false
        case .submit, .accepted, .rejected, .task, .result, .progress, .cancel: true
        }
    }
}

/// The 32-byte header frame that starts every message (≤ 33 bytes, so libzmq stores it inline).
///
/// ```
/// offset size field
/// 0      2    magic "SN"
/// 2      1    version = 1
/// 3      1    command
/// 4      2    flags (u16 LE)
/// 6      2    reserved (0)
/// 8      4    arg (u32 LE): capacity | epoch | status | reason
/// 12     4    attempt (u32 LE)
/// 16     16   task id (UUID bytes; zero for connection-level commands)
/// ```
package struct Header: Sendable, Equatable {
    package static let size = 32
    package static let version: UInt8 = 1
    package static let magic: (UInt8, UInt8) = (UInt8(ascii: "S"), UInt8(ascii: "N"))
    /// ACCEPTED: the task was queued again after its worker was lost.
    package static let requeuedFlag: UInt16 = 1
    /// On SUBMIT: the task belongs to a detached job, whose id is a 4th frame.
    package static let detachedFlag: UInt16 = 2
    /// On ACCEPTED: a second frame lists more first ACCEPTEDs (``AcceptedTask/size`` bytes each).
    package static let acceptedListFlag: UInt16 = 2
    /// On BATCH: its sender reads a BATCH sent as one frame (``Batch/Form``). Peers before it ignore the bit.
    package static let readsOneFrameFlag: UInt16 = 1
    /// On SUBMIT: its sender reads ACCEPTED lists (``acceptedListFlag``). Brokers before it ignore the bit.
    package static let readsAcceptedListsFlag: UInt16 = 4

    package var command: Command
    package var flags: UInt16
    package var arg: UInt32
    package var attempt: UInt32
    package var taskID: TaskID

    package init(_ command: Command, flags: UInt16 = 0, arg: UInt32 = 0, attempt: UInt32 = 0, taskID: TaskID = .zero) {
        self.command = command
        self.flags = flags
        self.arg = arg
        self.attempt = attempt
        self.taskID = taskID
    }

    package func encode() -> [UInt8] { ByteWriter.bytes(capacity: Header.size, self.write(into:)) }

    /// Appends the 32 header bytes to `bytes`.
    package func write(into bytes: inout [UInt8]) {
        self.withBytes(framed: false) { bytes.append(contentsOf: $0) }
    }

    /// The header's 32 bytes (after a u32 LE frame length when `framed`), laid out in a buffer on the
    /// stack: appended in one go, where a field at a time cost ten appends (about 800 instructions,
    /// for every message of the hot path).
    @inline(__always)
    package func withBytes<R>(framed: Bool, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        var raw: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
        let count = withUnsafeMutableBytes(of: &raw) { self.write(into: $0, framed: framed) }
        return withUnsafeBytes(of: &raw) { body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    /// Writes the header's 32 bytes (after a u32 LE frame length when `framed`) at the start of `out`
    /// (room for that many) and returns how many bytes that is. Not generic: another module (the outbox, for
    /// every BATCH) calls it, where the generic ``withBytes(framed:_:)`` was neither inlined nor
    /// specialized and went through the standard library's generic `withUnsafeBytes(of:)` (~100
    /// instructions a call).
    @inline(__always)
    package func write(into out: UnsafeMutableRawBufferPointer, framed: Bool) -> Int {
        let at = framed ? 4 : 0
        precondition(out.count >= at + Header.size, "room for the header")
        if framed { out.storeBytes(of: UInt32(Header.size).littleEndian, toByteOffset: 0, as: UInt32.self) }
        out[at] = Header.magic.0
        out[at + 1] = Header.magic.1
        out[at + 2] = Header.version
        out[at + 3] = self.command.rawValue
        out.storeBytes(of: self.flags.littleEndian, toByteOffset: at + 4, as: UInt16.self)
        out.storeBytes(of: 0 as UInt16, toByteOffset: at + 6, as: UInt16.self)
        out.storeBytes(of: self.arg.littleEndian, toByteOffset: at + 8, as: UInt32.self)
        out.storeBytes(of: self.attempt.littleEndian, toByteOffset: at + 12, as: UInt32.self)
        out.storeBytes(of: self.taskID.high.bigEndian, toByteOffset: at + 16, as: UInt64.self)
        out.storeBytes(of: self.taskID.low.bigEndian, toByteOffset: at + 24, as: UInt64.self)
        return at + Header.size
    }

    /// Decodes and validates a header frame.
    /// - Throws: ``ProtocolError`` for a wrong size, magic, version, command or reserved field, and for a
    ///   task id that is zero where a task is meant (or non-zero on a connection-level command).
    package static func decode(_ bytes: UnsafeRawBufferPointer) throws(ProtocolError) -> Header {
        guard bytes.count == Header.size else {
            throw ProtocolError(.badHeaderLength, "header is \(bytes.count) bytes, expected \(Header.size)")
        }
        guard bytes[0] == Header.magic.0, bytes[1] == Header.magic.1 else {
            throw ProtocolError(.badMagic, "magic is \(bytes[0]) \(bytes[1]), expected \"SN\"")
        }
        guard bytes[2] == Header.version else {
            throw ProtocolError(.badVersion, "protocol version \(bytes[2]), this build speaks \(Header.version)")
        }
        guard let command = Command(rawValue: bytes[3]) else {
            throw ProtocolError(.unknownCommand, "command \(bytes[3]) is unknown")
        }
        // Each field in one unaligned load (the length is checked above): read a byte at a time, in
        // nested generic loops, a header cost ~450 instructions, and every message has one.
        guard bytes.loadUnaligned(fromByteOffset: 6, as: UInt16.self) == 0 else {
            throw ProtocolError(.reservedNotZero, "reserved header bytes are not zero")
        }
        let taskID = TaskID(
            high: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self)),
            low: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
        )
        if command.isTaskCommand && taskID == .zero {
            throw ProtocolError(.badTaskID, "\(command) without a task id")
        }
        if !command.isTaskCommand && taskID != .zero {
            throw ProtocolError(.badTaskID, "\(command) must not carry a task id")
        }
        return Header(
            command,
            flags: UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt16.self)),
            arg: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self)),
            attempt: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 12, as: UInt32.self)),
            taskID: taskID
        )
    }

    /// Whether `frames` (read in place) start with a header-sized frame of `command`: the message is
    /// one an in-place reader reads (it checks the rest), or another.
    package static func starts(_ frames: UnsafeBufferPointer<UnsafeRawBufferPointer>, as command: Command) -> Bool {
        guard let first = frames.first, first.count == Header.size else { return false }
        return first[3] == command.rawValue
    }

    /// The flags of a header ``decode(_:)-(UnsafeRawBufferPointer)`` checked, read in place.
    package static func flags(of bytes: UnsafeRawBufferPointer) -> UInt16 {
        UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt16.self))
    }

    package static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> Header {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(ProtocolError) -> Header in try Header.decode(buffer) }
        }
        return try result.get()
    }
}
