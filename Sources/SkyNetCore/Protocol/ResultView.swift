/// A RESULT checked in place (header, frame count, status, meta, error text) without copying its
/// frames: the broker forwards it as it came. The one check of a RESULT: ``WireMessage/decode(_:)``
/// runs it too, then reads the meta's values (``meta(of:)``) from the layout it checked.
package struct ResultView {
    package let taskID: TaskID
    package let attempt: UInt32
    package let status: ResultStatus
    /// The scan's time as its worker measured it (the meta's duration).
    package let durationMicroseconds: UInt32

    /// nil when the message is not a RESULT.
    package init?(_ packed: Batch.Packed) throws(ProtocolError) {
        guard packed.frame(0)[3] == Command.result.rawValue else { return nil }
        self = try packed.withFrames { frames throws(ProtocolError) in try ResultView(result: frames) }
    }

    /// nil when the message (frames read in place, header first) is not a RESULT.
    package init?(_ frames: WireMessage.RawFrames) throws(ProtocolError) {
        guard Header.starts(frames, as: .result) else { return nil }
        try self.init(result: frames)
    }

    /// Checks the frames of a RESULT (header first).
    package init(result frames: WireMessage.RawFrames) throws(ProtocolError) {
        let header = try Header.decode(frames[0])
        guard frames.count == 3 else {
            throw ProtocolError(.badFrameCount, "RESULT has \(frames.count) frames, expected 3")
        }
        guard let status = ResultStatus(rawValue: header.arg) else {
            throw ProtocolError(.invalidValue, "RESULT status \(header.arg) is unknown")
        }
        // The meta: a u16-prefixed UTF-8 system name, then u32 duration, u16 slot, u16 busy.
        let meta = frames[1]
        guard meta.count >= 2 else { throw ProtocolError(.badLength, "RESULT meta is truncated at byte 0") }
        let nameLength = Int(meta[0]) | Int(meta[1]) << 8
        guard nameLength <= ProtocolLimits.nameLength else {
            throw ProtocolError(
                .badLength,
                "RESULT meta system is \(nameLength) bytes, at most \(ProtocolLimits.nameLength)"
            )
        }
        guard meta.count == 2 + nameLength + 8 else {
            throw ProtocolError(.badLength, "RESULT meta is \(meta.count) bytes, expected \(2 + nameLength + 8)")
        }
        guard Self.isUTF8(UnsafeRawBufferPointer(rebasing: meta[2..<2 + nameLength])) else {
            throw ProtocolError(.invalidUTF8, "RESULT meta system is not valid UTF-8")
        }
        if status != .completed {
            let text = frames[2]
            guard text.count <= ProtocolLimits.errorLength else {
                throw ProtocolError(
                    .badLength,
                    "RESULT error is \(text.count) bytes, at most \(ProtocolLimits.errorLength)"
                )
            }
            guard Self.isUTF8(text) else { throw ProtocolError(.invalidUTF8, "RESULT error is not valid UTF-8") }
        }
        self.taskID = header.taskID
        self.attempt = header.attempt
        self.status = status
        let duration = 2 + nameLength
        self.durationMicroseconds =
            UInt32(meta[duration]) | UInt32(meta[duration + 1]) << 8 | UInt32(meta[duration + 2]) << 16
            | UInt32(meta[duration + 3]) << 24
    }

    /// The meta of a RESULT that ``init(result:)`` checked: its values, read from the layout known good
    /// (a u16-prefixed UTF-8 system name, then u32 duration, u16 slot, u16 busy).
    package static func meta(of frames: WireMessage.RawFrames) -> ResultMeta {
        let meta = frames[1]
        let nameLength = Int(meta[0]) | Int(meta[1]) << 8
        func u16(_ at: Int) -> UInt16 { UInt16(meta[at]) | UInt16(meta[at + 1]) << 8 }
        let at = 2 + nameLength
        return ResultMeta(
            system: String(decoding: UnsafeRawBufferPointer(rebasing: meta[2..<at]), as: UTF8.self),
            durationMicroseconds: UInt32(u16(at)) | UInt32(u16(at + 2)) << 16,
            slot: u16(at + 4),
            busy: u16(at + 6)
        )
    }

    /// The system name of a RESULT that ``init(result:)`` checked, taken from `previous` when it is the
    /// same (a job's results come from a few workers: a String made of each cost ~300 instructions,
    /// and an allocation when the name is longer than 15 bytes) and left there for the next.
    package static func system(of frames: WireMessage.RawFrames, previous: inout String?) -> String {
        let meta = frames[1]
        let name = UnsafeRawBufferPointer(rebasing: meta[2..<2 + (Int(meta[0]) | Int(meta[1]) << 8)])
        if let last = previous, ByteDecoding.string(last, is: name) { return last }
        let system = String(decoding: name, as: UTF8.self)
        previous = system
        return system
    }

    /// Whether `bytes` are valid UTF-8 (without making a String of them). ASCII, what system names
    /// and most errors are, is checked eight bytes at a time, then byte by byte (every RESULT's meta is
    /// checked twice on its way, at the broker and at the coordinator); the decoder starts at the
    /// first byte over 0x7F.
    package static func isUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let highBits: UInt64 = 0x8080_8080_8080_8080
        var start = 0
        while start + 8 <= bytes.count {
            let word = bytes.loadUnaligned(fromByteOffset: start, as: UInt64.self)
            if word & highBits != 0 { break }
            start += 8
        }
        // Under a word left, of a text at least a word long (the words before it all ASCII): the
        // text's last eight bytes, which cover it, in one word (byte by byte it cost ~3
        // instructions a byte: a name's tail).
        if start < bytes.count, bytes.count >= 8, start > bytes.count - 8,
            bytes.loadUnaligned(fromByteOffset: bytes.count - 8, as: UInt64.self) & highBits == 0
        {
            return true
        }
        while start < bytes.count, bytes[start] < 0x80 { start += 1 }
        if start == bytes.count { return true }
        var iterator = UnsafeRawBufferPointer(rebasing: bytes[start...]).makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }
}

/// An ACCEPTED read in place, alone or a list (``Header/acceptedListFlag``): a coordinator gets one
/// for most tasks of a deep job (a task that waits in the broker's queue longer than the ACCEPTED
/// hold), and decoded into a ``WireMessage`` and destroyed it cost ~370 instructions more than its
/// checks and its use. Valid while the frames it was read from are.
package struct AcceptedView {
    package let taskID: TaskID
    package let attempt: UInt32
    /// The broker queued the task again after its worker was lost (``attempt`` is the new attempt).
    package let requeued: Bool
    /// A list's tasks after the header's (empty for a lone ACCEPTED), checked.
    private let more: UnsafeRawBufferPointer

    /// nil when the message (frames read in place, header first) is not an ACCEPTED.
    package init?(_ frames: WireMessage.RawFrames) throws(ProtocolError) {
        guard Header.starts(frames, as: .accepted) else { return nil }
        try self.init(accepted: frames)
    }

    /// Checks the frames of an ACCEPTED (header first): the one check, ``WireMessage/decode(_:)``'s too.
    package init(accepted frames: WireMessage.RawFrames) throws(ProtocolError) {
        let header = try Header.decode(frames[0])
        let list = header.flags & Header.acceptedListFlag != 0
        guard frames.count == (list ? 2 : 1) else {
            throw ProtocolError(
                .badFrameCount,
                "ACCEPTED\(list ? " list" : "") has \(frames.count) frames, expected \(list ? 2 : 1)"
            )
        }
        self.more = list ? frames[1] : UnsafeRawBufferPointer(start: nil, count: 0)
        if list {
            guard header.flags & Header.requeuedFlag == 0 else {
                throw ProtocolError(.invalidValue, "ACCEPTED list of requeued tasks")
            }
            let most = (ProtocolLimits.acceptedListMost - 1) * AcceptedTask.size
            guard self.more.count >= AcceptedTask.size, self.more.count <= most,
                self.more.count % AcceptedTask.size == 0
            else {
                throw ProtocolError(
                    .badLength,
                    "ACCEPTED list's tasks are \(self.more.count) bytes, expected \(AcceptedTask.size)...\(most) in steps of \(AcceptedTask.size)"
                )
            }
            for at in stride(from: 0, to: self.more.count, by: AcceptedTask.size)
            where AcceptedTask.read(self.more, at: at).id == .zero {
                throw ProtocolError(.badTaskID, "ACCEPTED list names a task without an id")
            }
        }
        self.taskID = header.taskID
        self.attempt = header.attempt
        self.requeued = header.flags & Header.requeuedFlag != 0
    }

    /// Whether this is a list.
    package var isList: Bool { !self.more.isEmpty }

    /// Calls `body` with each task the ACCEPTED names, the header's first.
    package func forEach(_ body: (TaskID, UInt32) -> Void) {
        body(self.taskID, self.attempt)
        for at in stride(from: 0, to: self.more.count, by: AcceptedTask.size) {
            let task = AcceptedTask.read(self.more, at: at)
            body(task.id, task.attempt)
        }
    }
}
