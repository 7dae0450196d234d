/// BATCH (DESIGN.md §4): several whole messages for one peer in one ZeroMQ message, so that a burst
/// of small messages (the TASKs for a worker's freed credits, a worker's RESULTs, a coordinator's
/// SUBMITs, the ACCEPTEDs and RESULTs going back to it) costs one send, one receive and at most one
/// wake-up on each side instead of one per message.
///
/// Frames: a header (command BATCH, arg = n, 1...``maxMessages``), then one frame that holds the n
/// messages one after the other; or, to a peer known to read it (``Form``), one frame: the header
/// with the packed messages after it. The packed messages are each
///
/// ```
/// u8      frame count (1...8)
/// repeat: u32 LE length, then that many bytes   (the first frame is the message's 32-byte header)
/// ```
///
/// The messages inside are ordinary messages, decoded and validated one by one like any other; a
/// BATCH inside a BATCH is refused. Senders pack only small messages (see ``Outbox``): a large
/// payload still travels as its own message, so the broker can forward it without copying.
package enum Batch {
    /// How a message received came, as far as BATCHes go, and what it says of its sender. Every
    /// BATCH a peer sends since the one-frame form carries ``Header/readsOneFrameFlag``; a sender of
    /// the two-frame form without it (a build before) never gets the one-frame form, which it would
    /// refuse. The rules (who is sent which) are the ``Outbox``'s.
    package enum Form: Equatable, Sendable {
        /// Not a BATCH (a lone message of a build before BATCHes of one, or a large one).
        case notBatch
        /// Header, then the packed messages; whether its sender reads the one-frame form.
        case twoFrames(senderReadsOneFrame: Bool)
        /// The header with the packed messages after it, in one frame.
        case oneFrame

        package var isBatch: Bool { self != .notBatch }

        /// The form of a message whose first frame (after any routing id) is `first`, of `frames`.
        package static func of(first: UnsafeRawBufferPointer, frames: Int) -> Form {
            guard first.count >= Header.size, first[3] == Command.batch.rawValue else { return .notBatch }
            if frames == 2 && first.count == Header.size {
                return .twoFrames(senderReadsOneFrame: Header.flags(of: first) & Header.readsOneFrameFlag != 0)
            }
            return frames == 1 && first.count > Header.size ? .oneFrame : .notBatch
        }
    }

    /// A one-frame BATCH's header and its packed messages (``Form/oneFrame``).
    package static func split(
        oneFrame frame: UnsafeRawBufferPointer
    ) -> (header: UnsafeRawBufferPointer, packed: UnsafeRawBufferPointer) {
        precondition(frame.count > Header.size, "a one-frame BATCH is longer than its header")
        return (
            UnsafeRawBufferPointer(rebasing: frame[..<Header.size]),
            UnsafeRawBufferPointer(rebasing: frame[Header.size...])
        )
    }

    /// Most messages in one BATCH.
    package static let maxMessages = 1024
    /// Most frames in one message inside a BATCH (the longest message, a JOB result, has 7).
    package static let maxFramesPerMessage = 8

    /// Packs messages for one BATCH frame.
    package struct Writer {
        /// The packed messages (``GrowableBytes``: emptied and refilled for every BATCH sent).
        private var packed = GrowableBytes()
        package private(set) var count = 0

        package init() {}

        /// The packed messages, copied out.
        package var bytes: [UInt8] { self.packed.array }

        /// How many bytes the packed messages take.
        package var byteCount: Int { self.packed.count }

        /// Calls `body` with the packed messages, read in place and valid only inside the call.
        package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            try self.packed.withUnsafeBytes(body)
        }

        /// The BATCH's ``header``, and its packed messages where they are: valid while this writer is
        /// neither changed nor dropped, which its caller must see to (the outbox sends them from the
        /// slot that holds the writer, and frees the slot only after). For the outbox's sends, in
        /// another module, where ``withUnsafeBytes(_:)`` (generic) was neither specialized nor
        /// inlined, and a non-generic closure cost the call, its thunk and a retain of the storage
        /// (~120 instructions a BATCH sent). Mutating though it changes nothing: the outbox's writers
        /// lie in an array's elements, and a getter called on one across the module boundary was
        /// handed a copy of the writer (a retain and a release of its storage, two a BATCH sent: ~80
        /// instructions), where a mutating call is made on the element in place.
        package mutating func sendParts() -> (header: Header, body: UnsafeRawBufferPointer) {
            (self.header, self.packed.unsafeBytes)
        }

        package mutating func append(_ frames: [[UInt8]]) {
            self.packed.append(UInt8(frames.count))
            for frame in frames {
                self.length(frame.count)
                frame.withUnsafeBytes { self.packed.append($0) }
            }
            self.count += 1
        }

        /// Appends a message whose frames are read in place.
        package mutating func append(frames: UnsafeBufferPointer<UnsafeRawBufferPointer>) {
            self.packed.append(UInt8(frames.count))
            for frame in frames {
                self.length(frame.count)
                self.packed.append(frame)
            }
            self.count += 1
        }

        /// Empties the writer; it keeps its storage unless that grew beyond `limit` bytes.
        package mutating func reset(keepingUpTo limit: Int = Self.keptCapacity) {
            self.packed.removeAll(keepingCapacityUpTo: limit)
            self.count = 0
        }

        /// An emptied writer keeps storage up to this size.
        package static let keptCapacity = 64 << 10

        /// Appends a TASK, written straight from its parts (the input from where the broker keeps it).
        package mutating func appendTask(_ id: TaskID, attempt: UInt32, _ envelope: TaskEnvelope, input: TaskBytes) {
            input.withUnsafeBytes { self.append(.task, id, attempt: attempt, envelope, input: $0) }
            self.count += 1
        }

        private mutating func append(
            _ command: Command,
            _ id: TaskID,
            attempt: UInt32,
            _ envelope: TaskEnvelope,
            input: [UInt8]
        ) {
            input.withUnsafeBytes { self.append(command, id, attempt: attempt, envelope, input: $0) }
            self.count += 1
        }

        /// Appends a task's SUBMIT, written straight from the task (the coordinator's first SUBMITs:
        /// no message made, the task not copied out of the job's list). It says that its sender reads
        /// ACCEPTED lists (``Header/readsAcceptedListsFlag``): a coordinator's SUBMITs are written here.
        /// `task` is read during the call, field by field (a `ScanTask` parameter, even borrowed, was
        /// copied whole where the caller read it through a pointer).
        package mutating func appendSubmit(_ task: UnsafePointer<ScanTask>) {
            let envelope = task.pointee.envelope
            task.pointee.input.withUnsafeBytes {
                self.append(
                    .submit,
                    task.pointee.id,
                    attempt: task.pointee.attempt,
                    envelope,
                    input: $0,
                    flags: Header.readsAcceptedListsFlag
                )
            }
            self.count += 1
        }

        /// A SUBMIT or TASK: its frame count, header, envelope and input frames, written in one go
        /// (``appendThreeFrames(_:name:nameLimit:fixedCount:_:payload:orElse:)``) when the kind is at most
        /// ``ProtocolLimits/kindLength`` bytes (always, for a task a peer accepts); field by field it
        /// took nine appends, ~500 instructions per TASK or SUBMIT.
        private mutating func append(
            _ command: Command,
            _ id: TaskID,
            attempt: UInt32,
            _ envelope: TaskEnvelope,
            input: UnsafeRawBufferPointer,
            flags: UInt16 = 0
        ) {
            self.appendThreeFrames(
                Header(command, flags: flags, attempt: attempt, taskID: id),
                name: envelope.kind,
                nameLimit: ProtocolLimits.kindLength,
                fixedCount: 12,
                { envelope.writeFixed(into: $0) },
                payload: input,
                orElse: { envelope.write(into: &$0) }
            )
        }

        /// The layout a TASK, SUBMIT and RESULT share: frame count 3, the header, a frame of a
        /// u16-prefixed name and `fixedCount` bytes that `writeFixed` fills, then `payload` as the
        /// third frame. Written in place, in one go, payload included (an append a field cost ~100
        /// instructions each; laid out on the stack first, a copy more). A name longer than
        /// `nameLimit` bytes (a peer refuses it; the encoder still writes it) goes field by field, its
        /// frame by `orElse`.
        @inline(__always)  // its closures then cost nothing (~120 instructions a task without)
        private mutating func appendThreeFrames(
            _ header: Header,
            name: String,
            nameLimit: Int,
            fixedCount: Int,
            _ writeFixed: (UnsafeMutableRawBufferPointer) -> Void,
            payload: UnsafeRawBufferPointer,
            orElse writeSecond: (inout [UInt8]) -> Void
        ) {
            let written = name.withUTF8Bytes { name -> Bool in
                guard name.count <= nameLimit else { return false }
                let second = 2 + name.count + fixedCount
                self.packed.write(count: 1 + 4 + Header.size + 4 + second + 4 + payload.count) { out in
                    out.storeBytes(of: 3, as: UInt8.self)
                    header.withBytes(framed: true) { (out + 1).copyMemory(from: $0.baseAddress!, byteCount: 36) }
                    out.storeBytes(of: UInt32(second).littleEndian, toByteOffset: 37, as: UInt32.self)
                    out.storeBytes(of: UInt16(name.count).littleEndian, toByteOffset: 41, as: UInt16.self)
                    if let base = name.baseAddress { (out + 43).copyMemory(from: base, byteCount: name.count) }
                    var at = 43 + name.count
                    writeFixed(UnsafeMutableRawBufferPointer(start: out + at, count: fixedCount))
                    at += fixedCount
                    let payloadCount = UInt32(truncatingIfNeeded: payload.count).littleEndian
                    out.storeBytes(of: payloadCount, toByteOffset: at, as: UInt32.self)
                    at += 4
                    if let base = payload.baseAddress { (out + at).copyMemory(from: base, byteCount: payload.count) }
                }
                return true
            }
            guard !written else { return }
            // A name over its limit (a peer refuses it): field by field.
            self.packed.append(3)
            header.withBytes(framed: true) { self.packed.append($0) }
            self.frame(writeSecond)
            self.length(payload.count)
            self.packed.append(payload)
        }

        /// Appends `message`, written straight from its parts for the messages of the hot path (no
        /// frames built), encoded first for the others.
        package mutating func append(_ message: WireMessage) {
            switch message {
            case .submit(let id, let attempt, let envelope, let input):
                self.append(.submit, id, attempt: attempt, envelope, input: input)
            case .task(let id, let attempt, let envelope, let input):
                self.append(.task, id, attempt: attempt, envelope, input: input)
            case .result(let id, let attempt, let status, let meta, let body):
                body.withUnsafeBytes { self.appendResult(id, attempt: attempt, status, meta, body: $0) }
            case .heartbeat(let epoch, let interval):
                self.headerOnly(Header(.heartbeat, arg: epoch, attempt: interval))
            case .accepted(let id, let attempt, let requeued):
                self.appendAccepted(id, attempt: attempt, requeued: requeued)
            case .cancel(let id):
                self.headerOnly(Header(.cancel, taskID: id))
            default:
                self.append(message.encode())
            }
        }

        /// Appends a RESULT, written straight from its parts.
        package mutating func appendResult(
            _ id: TaskID,
            attempt: UInt32,
            _ status: ResultStatus,
            _ meta: ResultMeta,
            body: UnsafeRawBufferPointer
        ) {
            // In one append (``appendThreeFrames``) when the name is within the protocol's limit (the
            // usual RESULT); a field at a time it took seven, ~600 instructions per RESULT.
            self.appendThreeFrames(
                Header(.result, arg: status.rawValue, attempt: attempt, taskID: id),
                name: meta.system,
                nameLimit: ProtocolLimits.nameLength,
                fixedCount: 8,
                { meta.writeFixed(into: $0) },
                payload: body,
                orElse: { meta.write(into: &$0) }
            )
            self.count += 1
        }

        /// Appends an ACCEPTED, written straight from its parts.
        package mutating func appendAccepted(_ id: TaskID, attempt: UInt32, requeued: Bool = false) {
            self.headerOnly(Header(.accepted, flags: requeued ? Header.requeuedFlag : 0, attempt: attempt, taskID: id))
        }

        /// Appends an ACCEPTED list (``Header/acceptedListFlag``) of `count` tasks, 2 to
        /// ``ProtocolLimits/acceptedListMost``, `task(i)` the i-th: the first in the header, the others
        /// in the second frame, written in place (a broker sends one for a run of held first
        /// ACCEPTEDs to a coordinator that reads them, instead of a message for each).
        package mutating func appendAcceptedList(count: Int, _ task: (Int) -> AcceptedTask) {
            precondition(count >= 2 && count <= ProtocolLimits.acceptedListMost, "an ACCEPTED list of \(count)")
            let first = task(0)
            let more = (count - 1) * AcceptedTask.size
            // The frame count, the framed header, the second frame's length and its bytes, written in
            // place.
            let total = 1 + 4 + Header.size + 4 + more
            self.packed.write(count: total) { start in
                let out = UnsafeMutableRawBufferPointer(start: start, count: total)
                out[0] = 2
                let header = Header(.accepted, flags: Header.acceptedListFlag, attempt: first.attempt, taskID: first.id)
                header.withBytes(framed: true) {
                    out.baseAddress!.advanced(by: 1).copyMemory(from: $0.baseAddress!, byteCount: 4 + Header.size)
                }
                var at = 1 + 4 + Header.size
                out.storeBytes(of: UInt32(more).littleEndian, toByteOffset: at, as: UInt32.self)
                at += 4
                for index in 1..<count {
                    task(index).write(into: out, at: at)
                    at += AcceptedTask.size
                }
            }
            self.count += 1
        }

        private mutating func headerOnly(_ header: Header) {
            // The frame count and the framed header in one append (two cost twice as much).
            var raw: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &raw) { buffer in
                buffer[0] = 1
                header.withBytes(framed: true) {
                    buffer.baseAddress!.advanced(by: 1).copyMemory(from: $0.baseAddress!, byteCount: 36)
                }
                self.packed.append(UnsafeRawBufferPointer(rebasing: buffer[0..<37]))
            }
            self.count += 1
        }

        /// Appends one frame: its length, then what `body` writes (the cold path of a name over its
        /// limit: written into an array first).
        private mutating func frame(_ body: (inout [UInt8]) -> Void) {
            var bytes: [UInt8] = []
            body(&bytes)
            self.length(bytes.count)
            bytes.withUnsafeBytes { self.packed.append($0) }
        }

        /// Appends a message already in packed form (from another BATCH), as it is.
        package mutating func append(packed: UnsafeRawBufferPointer) {
            self.packed.append(packed)
            self.count += 1
        }

        private mutating func length(_ value: Int) {
            self.packed.appendUInt32(UInt32(truncatingIfNeeded: value))
        }

        /// The two frames of the BATCH message.
        package func frames() -> [[UInt8]] { [self.header.encode(), self.bytes] }

        /// The header of the BATCH this writer holds (with ``Header/readsOneFrameFlag``: every
        /// BATCH sent says that its sender reads the one-frame form).
        package var header: Header { Header(.batch, flags: Header.readsOneFrameFlag, arg: UInt32(self.count)) }
    }

    /// The u32 little-endian frame length at `offset` (the caller has checked that 4 bytes are there).
    @inline(__always)
    package static func length(at offset: Int, in bytes: UnsafeRawBufferPointer) -> Int {
        Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
    }

    /// Splits a BATCH frame into its `count` messages (each a list of frames, header first).
    /// - Throws: ``ProtocolError`` when the count or a length is out of range, a message does not start
    ///   with a header-sized frame, a BATCH is nested, or bytes are missing or left over.
    package static func unpack(_ bytes: UnsafeRawBufferPointer, count: UInt32) throws(ProtocolError) -> [[[UInt8]]] {
        var messages: [[[UInt8]]] = []
        messages.reserveCapacity(Int(min(count, UInt32(Batch.maxMessages))))
        try Batch.forEach(bytes, count: count) { messages.append($0.frames) }
        return messages
    }

    /// One message inside a BATCH frame, read in place: valid only while that frame is.
    package struct Packed {
        /// The whole packed message (its frame count, lengths and bytes), to pass on as it is.
        package let raw: UnsafeRawBufferPointer
        package let frameCount: Int

        /// Frame `index`'s bytes.
        package func frame(_ index: Int) -> UnsafeRawBufferPointer {
            var offset = 1
            for i in 0...index {
                let length = Batch.length(at: offset, in: self.raw)
                offset += 4
                if i == index { return UnsafeRawBufferPointer(rebasing: self.raw[offset..<offset + length]) }
                offset += length
            }
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }

        /// Copies of the frames.
        package var frames: [[UInt8]] { (0..<self.frameCount).map { Array(self.frame($0)) } }

        /// Calls `body` with the frames read in place (the list of them is on the stack).
        package func withFrames<R, E: Error>(
            _ body: (UnsafeBufferPointer<UnsafeRawBufferPointer>) throws(E) -> R
        ) throws(E) -> R {
            try withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: self.frameCount) {
                (frames) throws(E) -> R in
                var offset = 1
                for i in 0..<self.frameCount {
                    let length = Batch.length(at: offset, in: self.raw)
                    offset += 4
                    frames.initializeElement(
                        at: i,
                        to: UnsafeRawBufferPointer(rebasing: self.raw[offset..<offset + length])
                    )
                    offset += length
                }
                return try body(UnsafeBufferPointer(frames))
            }
        }
    }

    /// Visits the `count` messages of a BATCH frame in place, after checking the framing of all of
    /// them, so nothing is handled from a broken BATCH.
    /// - Throws: ``ProtocolError`` when the count or a length is out of range, a message does not start
    ///   with a header-sized frame, a BATCH is nested, or bytes are missing or left over.
    package static func forEach(
        _ bytes: UnsafeRawBufferPointer,
        count: UInt32,
        _ body: (Packed) -> Void
    ) throws(ProtocolError) {
        guard count >= 1, count <= Batch.maxMessages else {
            throw ProtocolError(.invalidValue, "BATCH of \(count) messages, expected 1...\(Batch.maxMessages)")
        }
        // Two walks: the first checks the framing of every message, the second visits them (reading
        // the lengths again costs less than an array of where they start, allocated per BATCH).
        var offset = 0
        for index in 0..<Int(count) {
            guard offset < bytes.count else {
                throw ProtocolError(.badLength, "BATCH ends before message \(index + 1) of \(count)")
            }
            let frameCount = Int(bytes[offset])
            offset += 1
            guard frameCount >= 1, frameCount <= Batch.maxFramesPerMessage else {
                throw ProtocolError(
                    .badFrameCount,
                    "BATCH message \(index + 1) has \(frameCount) frames, expected 1...\(Batch.maxFramesPerMessage)"
                )
            }
            for frame in 0..<frameCount {
                guard bytes.count - offset >= 4 else {
                    throw ProtocolError(.badLength, "BATCH message \(index + 1) is truncated")
                }
                let length = Batch.length(at: offset, in: bytes)
                offset += 4
                guard bytes.count - offset >= length else {
                    throw ProtocolError(.badLength, "BATCH message \(index + 1) is truncated")
                }
                if frame == 0 {
                    guard length == Header.size else {
                        throw ProtocolError(
                            .badHeaderLength,
                            "BATCH message \(index + 1) starts with \(length) bytes, expected a \(Header.size)-byte header"
                        )
                    }
                    guard bytes[offset + 3] != Command.batch.rawValue else {
                        throw ProtocolError(.invalidValue, "BATCH inside a BATCH")
                    }
                }
                offset += length
            }
        }
        guard offset == bytes.count else {
            throw ProtocolError(.badLength, "BATCH has \(bytes.count - offset) bytes after its \(count) messages")
        }
        offset = 0
        let last = Int(count) - 1
        for index in 0...last {
            let start = offset
            let frameCount = Int(bytes[offset])
            if index == last {
                // The last message runs to the end, as the first walk found: its lengths are not read
                // again (a BATCH of one, the whole of a latency round trip's, is walked once).
                offset = bytes.count
            } else {
                offset += 1
                for _ in 0..<frameCount { offset += 4 + Batch.length(at: offset, in: bytes) }
            }
            body(Packed(raw: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), frameCount: frameCount))
        }
    }

    package static func unpack(_ bytes: [UInt8], count: UInt32) throws(ProtocolError) -> [[[UInt8]]] {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(ProtocolError) -> [[[UInt8]]] in try Batch.unpack(buffer, count: count) }
        }
        return try result.get()
    }
}
