/// Limits every decoder enforces; anything larger is rejected, never allocated.
package enum ProtocolLimits {
    /// Longest scanner kind name, in UTF-8 bytes.
    package static let kindLength = 64
    /// Longest worker or system name.
    package static let nameLength = 128
    /// Most kinds one worker may announce.
    package static let kindsPerWorker = 64
    /// Longest error or reason text.
    package static let textLength = 4096
    /// A failed RESULT's body: its message (at most ``textLength``) and its detail.
    package static let errorLength = 64 << 10
    /// Largest whole message (also `ZMQ_MAXMSGSIZE` on every socket): 16 MiB.
    package static let maxMessageSize: Int64 = 16 << 20
    /// Most tasks one ACCEPTED list names, the header's included (its frame stays well under a
    /// BATCH's 16 KiB of gathered messages).
    package static let acceptedListMost = 512
}

/// One task a first ACCEPTED names: in an ACCEPTED list (``Header/acceptedListFlag``), the tasks after
/// the header's, each its 16-byte id and u32 LE attempt.
package struct AcceptedTask: Sendable, Equatable {
    package var id: TaskID
    package var attempt: UInt32

    package init(_ id: TaskID, attempt: UInt32) {
        self.id = id
        self.attempt = attempt
    }

    /// Bytes per task in an ACCEPTED list's second frame.
    package static let size = 20

    /// Writes the task's ``size`` bytes at `at` (the id as a header holds it, big-endian, then the
    /// attempt, little-endian); `out` must have room.
    package func write(into out: UnsafeMutableRawBufferPointer, at: Int) {
        precondition(at >= 0 && out.count - at >= Self.size, "no room for an accepted task")
        out.storeBytes(of: self.id.high.bigEndian, toByteOffset: at, as: UInt64.self)
        out.storeBytes(of: self.id.low.bigEndian, toByteOffset: at + 8, as: UInt64.self)
        out.storeBytes(of: self.attempt.littleEndian, toByteOffset: at + 16, as: UInt32.self)
    }

    /// The task whose ``size`` bytes start at `at` in `bytes` (which must hold them).
    package static func read(_ bytes: UnsafeRawBufferPointer, at: Int) -> AcceptedTask {
        precondition(at >= 0 && bytes.count - at >= Self.size, "an accepted task cut short")
        return AcceptedTask(
            TaskID(
                high: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)),
                low: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self))
            ),
            attempt: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at + 16, as: UInt32.self))
        )
    }
}

/// How a task attempt ended (the RESULT header's `arg`).
package enum ResultStatus: UInt32, Sendable, CaseIterable, CustomStringConvertible {
    case completed = 0
    case failed = 1
    case timedOut = 2
    case cancelled = 3

    package var description: String {
        switch self {
        case .completed: "completed"
        case .failed: "failed"
        case .timedOut: "timed out"
        case .cancelled: "cancelled"
        }
    }
}

/// Why a peer sends DISCONNECT (the header's `arg`).
package enum DisconnectReason: UInt32, Sendable, CaseIterable, CustomStringConvertible {
    /// The sender is stopping.
    case shutdown = 0
    /// A worker stops taking tasks and finishes the ones it has.
    case draining = 1
    /// The broker does not know the peer (it restarted, or expired the peer): send READY again.
    case unknownPeer = 2
    /// The peer broke the protocol.
    case protocolError = 3
    /// The peer speaks another protocol version.
    case version = 4
    /// The peer connected to the other port (a worker to the coordinators' frontend, or a
    /// coordinator to the workers' backend); the text says which port to use.
    case wrongPort = 5
    /// The peer's key is no longer allowed (removed from the broker's allowlist).
    case revoked = 6
    /// The broker is at its limit of workers or coordinators.
    case limit = 7
    /// The broker is a standby of an HA group (or a leader that stepped down): it takes no task.
    /// The text is the leader's endpoint for the receiver's port when the sender knows it, else empty.
    case notLeader = 8

    package var description: String {
        switch self {
        case .notLeader: "not the leader"
        case .wrongPort: "wrong port"
        case .revoked: "key revoked"
        case .limit: "at its limit"
        case .shutdown: "shutdown"
        case .draining: "draining"
        case .unknownPeer: "unknown peer"
        case .protocolError: "protocol error"
        case .version: "version"
        }
    }
}

/// Why the broker refused a SUBMIT (the REJECTED header's `arg`).
package enum RejectReason: UInt32, Sendable, CaseIterable, CustomStringConvertible {
    case duplicateID = 1
    case queueFull = 2
    case shuttingDown = 3
    case invalid = 4

    package var description: String {
        switch self {
        case .duplicateID: "duplicate task id"
        case .queueFull: "queue full"
        case .shuttingDown: "broker shutting down"
        case .invalid: "invalid task"
        }
    }
}

/// The SUBMIT/TASK envelope: everything the broker and worker need to know about a task but its input.
package struct TaskEnvelope: Sendable, Equatable {
    /// Which ``TaskScanner`` runs it.
    package var kind: String
    /// Higher runs first; equal priorities run in submission order.
    package var priority: Int32
    /// Per-attempt time limit in milliseconds; 0 means none.
    package var timeoutMilliseconds: UInt32
    /// Attempts allowed in all (remote and local), at least 1.
    package var maxAttempts: UInt16
    package var flags: UInt16

    package init(
        kind: String,
        priority: Int32 = 0,
        timeoutMilliseconds: UInt32 = 0,
        maxAttempts: UInt16 = 3,
        flags: UInt16 = 0
    ) {
        self.kind = kind
        self.priority = priority
        self.timeoutMilliseconds = timeoutMilliseconds
        self.maxAttempts = maxAttempts
        self.flags = flags
    }

    package func encode() -> [UInt8] { ByteWriter.bytes(capacity: self.encodedSize, self.write(into:)) }

    /// The bytes ``encode()`` makes.
    package var encodedSize: Int { 14 + self.kind.utf8.count }

    /// Appends the envelope's bytes to `bytes`.
    package func write(into bytes: inout [UInt8]) {
        ByteWriter.appending(to: &bytes) { writer in writer.string(self.kind) }
        // The fixed fields in one append (a field at a time cost four).
        var raw: (UInt64, UInt32) = (0, 0)
        withUnsafeMutableBytes(of: &raw) { self.writeFixed(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<12])) }
        withUnsafeBytes(of: &raw) { bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<12])) }
    }

    /// Writes the 12 bytes after the kind (priority, timeout, max attempts, flags) into `out`.
    package func writeFixed(into out: UnsafeMutableRawBufferPointer) {
        precondition(out.count == 12, "an envelope's fixed fields are 12 bytes")
        out.storeBytes(of: UInt32(bitPattern: self.priority).littleEndian, toByteOffset: 0, as: UInt32.self)
        out.storeBytes(of: self.timeoutMilliseconds.littleEndian, toByteOffset: 4, as: UInt32.self)
        out.storeBytes(of: self.maxAttempts.littleEndian, toByteOffset: 8, as: UInt16.self)
        out.storeBytes(of: self.flags.littleEndian, toByteOffset: 10, as: UInt16.self)
    }

    /// ``decode(_:)`` of a frame read in place, whose kind is most often the kind of the task before
    /// it: when its bytes are `previous`'s, that String is taken again instead of a new one made and
    /// its UTF-8 checked (a BATCH of SUBMITs or TASKs is mostly of one kind: ~450 instructions a task
    /// in the broker). The fixed fields are read with unaligned loads. Anything but a well-formed
    /// envelope goes to ``decode(_:)``, so that every error is its own.
    package static func decode(
        _ bytes: UnsafeRawBufferPointer,
        previousKind previous: inout String?
    ) throws(ProtocolError) -> TaskEnvelope {
        guard bytes.count >= 14 else { return try Self.decode(bytes) }
        let length = Int(UInt16(littleEndian: bytes.loadUnaligned(as: UInt16.self)))
        guard length >= 1, length <= ProtocolLimits.kindLength, bytes.count == 14 + length else {
            return try Self.decode(bytes)
        }
        let fixed = 2 + length
        let maxAttempts = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: fixed + 8, as: UInt16.self))
        guard maxAttempts >= 1 else { return try Self.decode(bytes) }
        let kindBytes = UnsafeRawBufferPointer(rebasing: bytes[2..<fixed])
        let kind: String
        if let last = previous, ByteDecoding.string(last, is: kindBytes) {
            kind = last
        } else {
            kind = try ByteDecoding.utf8(kindBytes, field: "envelope kind")
            previous = kind
        }
        return TaskEnvelope(
            kind: kind,
            priority: Int32(littleEndian: bytes.loadUnaligned(fromByteOffset: fixed, as: Int32.self)),
            timeoutMilliseconds: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: fixed + 4, as: UInt32.self)),
            maxAttempts: maxAttempts,
            flags: UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: fixed + 10, as: UInt16.self))
        )
    }

    package static func decode<Bytes: RandomAccessCollection<UInt8>>(
        _ bytes: Bytes
    ) throws(ProtocolError) -> TaskEnvelope where Bytes.Index == Int {
        var reader = ByteReader(bytes, what: "envelope")
        let kind = try reader.string(maxLength: ProtocolLimits.kindLength, field: "kind")
        guard !kind.isEmpty else { throw ProtocolError(.invalidValue, "envelope kind is empty") }
        let envelope = TaskEnvelope(
            kind: kind,
            priority: try reader.i32(),
            timeoutMilliseconds: try reader.u32(),
            maxAttempts: try reader.u16(),
            flags: try reader.u16()
        )
        try reader.finish()
        guard envelope.maxAttempts >= 1 else { throw ProtocolError(.invalidValue, "envelope maxAttempts is 0") }
        return envelope
    }
}

/// What a worker says about itself in READY.
package struct ReadyInfo: Sendable, Equatable {
    package var name: String
    package var kinds: [String]
    package var heartbeatMilliseconds: UInt32
    package var version: String

    package init(name: String, kinds: [String], heartbeatMilliseconds: UInt32, version: String) {
        self.name = name
        self.kinds = kinds
        self.heartbeatMilliseconds = heartbeatMilliseconds
        self.version = version
    }

    package func encode() -> [UInt8] {
        var writer = ByteWriter(capacity: 64)
        writer.string(self.name)
        writer.u16(UInt16(clamping: self.kinds.count))
        for kind in self.kinds { writer.string(kind) }
        writer.u32(self.heartbeatMilliseconds)
        writer.string(self.version)
        return writer.bytes
    }

    package static func decode<Bytes: RandomAccessCollection<UInt8>>(
        _ bytes: Bytes
    ) throws(ProtocolError) -> ReadyInfo where Bytes.Index == Int {
        var reader = ByteReader(bytes, what: "READY info")
        let name = try reader.string(maxLength: ProtocolLimits.nameLength, field: "name")
        let count = Int(try reader.u16())
        guard count >= 1, count <= ProtocolLimits.kindsPerWorker else {
            throw ProtocolError(
                .invalidValue,
                "READY announces \(count) kinds, expected 1...\(ProtocolLimits.kindsPerWorker)"
            )
        }
        var kinds: [String] = []
        for _ in 0..<count {
            let kind = try reader.string(maxLength: ProtocolLimits.kindLength, field: "kind")
            guard !kind.isEmpty else { throw ProtocolError(.invalidValue, "READY kind is empty") }
            kinds.append(kind)
        }
        let heartbeat = try reader.u32()
        guard Heartbeat.allowedMilliseconds.contains(heartbeat) else {
            throw ProtocolError(
                .invalidValue,
                "READY heartbeat \(heartbeat) ms is outside \(Heartbeat.allowedMilliseconds)"
            )
        }
        let version = try reader.string(maxLength: ProtocolLimits.nameLength, field: "version")
        try reader.finish()
        return ReadyInfo(name: name, kinds: kinds, heartbeatMilliseconds: heartbeat, version: version)
    }
}

/// Where and how an attempt ran (RESULT's second frame).
package struct ResultMeta: Sendable, Equatable {
    /// The ScanSystem that ran it (the worker's name, or "local").
    package var system: String
    /// How long the scan took, in microseconds.
    package var durationMicroseconds: UInt32
    /// The slot (0..<slots) it ran in.
    package var slot: UInt16
    /// How many scans were running in that system when it started, itself included.
    package var busy: UInt16

    package init(system: String, durationMicroseconds: UInt32, slot: UInt16, busy: UInt16) {
        self.system = system
        self.durationMicroseconds = durationMicroseconds
        self.slot = slot
        self.busy = busy
    }

    package func encode() -> [UInt8] { ByteWriter.bytes(capacity: 12 + self.system.utf8.count, self.write(into:)) }

    /// Appends the meta's bytes to `bytes`.
    package func write(into bytes: inout [UInt8]) {
        // The name as ByteWriter.string writes it (u16 length, then the bytes), appended straight
        // to `bytes`: once per RESULT, where a writer swapped in and out cost more than the copy.
        self.system.withUTF8Bytes { utf8 in
            let count = min(utf8.count, Int(UInt16.max))
            bytes.append(UInt8(truncatingIfNeeded: count))
            bytes.append(UInt8(truncatingIfNeeded: count >> 8))
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8.prefix(count)))
        }
        // The fixed fields in one append.
        var raw: UInt64 = 0
        withUnsafeMutableBytes(of: &raw) { self.writeFixed(into: $0) }
        withUnsafeBytes(of: &raw) { bytes.append(contentsOf: $0) }
    }

    /// Writes the fixed fields after the name (u32 duration, u16 slot, u16 busy) into `out`'s 8 bytes.
    package func writeFixed(into out: UnsafeMutableRawBufferPointer) {
        precondition(out.count == 8, "a RESULT meta's fixed fields are 8 bytes")
        out.storeBytes(of: self.durationMicroseconds.littleEndian, toByteOffset: 0, as: UInt32.self)
        out.storeBytes(of: self.slot.littleEndian, toByteOffset: 4, as: UInt16.self)
        out.storeBytes(of: self.busy.littleEndian, toByteOffset: 6, as: UInt16.self)
    }
}
