/// BATCH (DESIGN.md §4): several whole messages for one peer in one ZeroMQ message, so that a burst
/// of small messages (the TASKs for a worker's freed credits, a worker's RESULTs, a coordinator's
/// SUBMITs, the ACCEPTEDs and RESULTs going back to it) costs one send, one receive and at most one
/// wake-up on each side instead of one per message.
///
/// Frames: a header (command BATCH, arg = n, 1...``maxMessages``), then one frame that holds the n
/// messages one after the other, each as
///
/// ```
/// u8      frame count (1...8)
/// repeat: u32 LE length, then that many bytes   (the first frame is the message's 32-byte header)
/// ```
///
/// The messages inside are ordinary messages, decoded and validated one by one like any other; a
/// BATCH inside a BATCH is refused. Senders pack only small messages (see ``Outbox``): a large
/// payload still travels as its own message, so the broker can forward it without copying.
public enum Batch {
    /// Most messages in one BATCH.
    public static let maxMessages = 1024
    /// Most frames in one message inside a BATCH (the longest message, a JOB result, has 7).
    public static let maxFramesPerMessage = 8

    /// Packs messages for one BATCH frame.
    struct Writer {
        private(set) var bytes: [UInt8] = []
        private(set) var count = 0

        mutating func append(_ frames: [[UInt8]]) {
            self.bytes.append(UInt8(frames.count))
            for frame in frames {
                self.length(frame.count)
                self.bytes.append(contentsOf: frame)
            }
            self.count += 1
        }

        private mutating func length(_ value: Int) {
            var v = UInt32(truncatingIfNeeded: value).littleEndian
            withUnsafeBytes(of: &v) { self.bytes.append(contentsOf: $0) }
        }

        /// The two frames of the BATCH message.
        func frames() -> [[UInt8]] { [Header(.batch, arg: UInt32(self.count)).encode(), self.bytes] }
    }

    /// Splits a BATCH frame into its `count` messages (each a list of frames, header first).
    /// - Throws: ``ProtocolError`` when the count or a length is out of range, a message does not start
    ///   with a header-sized frame, a BATCH is nested, or bytes are missing or left over.
    static func unpack(_ bytes: UnsafeRawBufferPointer, count: UInt32) throws(ProtocolError) -> [[[UInt8]]] {
        guard count >= 1, count <= Batch.maxMessages else {
            throw ProtocolError(.invalidValue, "BATCH of \(count) messages, expected 1...\(Batch.maxMessages)")
        }
        var messages: [[[UInt8]]] = []
        messages.reserveCapacity(Int(count))
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
            var frames: [[UInt8]] = []
            frames.reserveCapacity(frameCount)
            for _ in 0..<frameCount {
                guard bytes.count - offset >= 4 else {
                    throw ProtocolError(.badLength, "BATCH message \(index + 1) is truncated")
                }
                var length = 0
                for i in 0..<4 { length |= Int(bytes[offset + i]) << (8 * i) }
                offset += 4
                guard bytes.count - offset >= length else {
                    throw ProtocolError(.badLength, "BATCH message \(index + 1) is truncated")
                }
                frames.append(Array(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])))
                offset += length
            }
            guard frames[0].count == Header.size else {
                throw ProtocolError(
                    .badHeaderLength,
                    "BATCH message \(index + 1) starts with \(frames[0].count) bytes, expected a \(Header.size)-byte header"
                )
            }
            guard frames[0][3] != Command.batch.rawValue else {
                throw ProtocolError(.invalidValue, "BATCH inside a BATCH")
            }
            messages.append(frames)
        }
        guard offset == bytes.count else {
            throw ProtocolError(.badLength, "BATCH has \(bytes.count - offset) bytes after its \(count) messages")
        }
        return messages
    }

    static func unpack(_ bytes: [UInt8], count: UInt32) throws(ProtocolError) -> [[[UInt8]]] {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(ProtocolError) -> [[[UInt8]]] in try Batch.unpack(buffer, count: count) }
        }
        return try result.get()
    }
}
