package import SkyNetCore
package import ZeroMQ

// Reading a received ZeroMQ message (its frames in libzmq's buffers) with the core's codec.
extension WireMessage {
    /// Decodes frames `start...` of a received message, read in place: only what the message keeps
    /// (an input, a body, a text) is copied out of libzmq's buffers.
    package static func decode(_ message: borrowing Multipart, from start: Int = 0) throws(ProtocolError) -> WireMessage
    {
        try self.checkFrameCount(message)
        return try message.withFrames(from: start) { frames throws(ProtocolError) in try self.decode(frames) }
    }

    /// A message with more frames than the socket keeps (``Multipart/overflowed``) is refused whole.
    private static func checkFrameCount(_ message: borrowing Multipart) throws(ProtocolError) {
        if message.overflowed {
            throw ProtocolError(.badFrameCount, "message has more than \(message.count) frames")
        }
    }

    /// Decodes frames `start...` of a received message and hands `body` each message in it, read in
    /// place: the message itself, or each message packed in a BATCH (a message inside that does not
    /// decode is handed over as its error). `body` returns false to stop.
    ///
    /// Each message, alone or packed in a BATCH, goes to `read` first (``InPlaceReader``): the
    /// messages it reads (the broker's SUBMITs, a worker's TASKs, a coordinator's RESULTs) are read
    /// in place and never decoded into a message, so that the broker keeps a task's input its own
    /// way, a worker scans it where it lies, and a coordinator copies out only what it keeps. It
    /// returns false to stop, like `body`. Neither closure escapes: an optional one would, and then
    /// everything it captured was retained and released for every task it was called with.
    /// - Returns: whether the message was a BATCH, and in which form (what it says of its sender:
    ///   ``Batch/Form``).
    /// - Throws: ``ProtocolError`` when the message, or the framing of the BATCH, is bad (then nothing
    ///   was handed over).
    @discardableResult
    package static func visit(
        _ message: borrowing Multipart,
        from start: Int = 0,
        read: WireMessage.InPlaceReader,
        _ body: (Result<WireMessage, ProtocolError>) -> Bool
    ) throws(ProtocolError) -> Batch.Form {
        let form = self.batchForm(message, from: start)
        guard form.isBatch else {
            // A lone message (tasks one at a time) is read in place too, as in a BATCH: decoded, a
            // task's input was copied into an array, and the message destroyed through its type's
            // witnesses (~650 instructions a latency round trip at the broker, as many at the worker).
            // One pass over the frames for both: `read`, then, when it does not read the message,
            // the decoder.
            try self.checkFrameCount(message)
            let decoded = try message.withFrames(from: start) { frames throws(ProtocolError) -> WireMessage? in
                try read(frames) == nil ? try self.decode(frames) : nil
            }
            if let decoded { _ = body(.success(decoded)) }
            return form
        }
        try self.withBatch(message, from: start, form: form) { packed, count throws(ProtocolError) in
            var going = true
            try Batch.forEach(packed, count: count) { message in
                guard going else { return }
                going = self.visit(message, read: read, body)
            }
        }
        return form
    }

    /// Hands `body` a BATCH's packed messages and their count (its header checked), in either
    /// ``Batch/Form``: the header frame and the frame after it, or one frame holding both.
    package static func withBatch(
        _ message: borrowing Multipart,
        from start: Int,
        form: Batch.Form,
        _ body: (UnsafeRawBufferPointer, UInt32) throws(ProtocolError) -> Void
    ) throws(ProtocolError) {
        precondition(form.isBatch, "a BATCH")
        if form == .oneFrame {
            try message.withBytes(of: start) { frame throws(ProtocolError) in
                let (head, packed) = Batch.split(oneFrame: frame)
                try body(packed, try Header.decode(head).arg)
            }
            return
        }
        let header = try message.withBytes(of: start) { bytes throws(ProtocolError) in try Header.decode(bytes) }
        try message.withBytes(of: start + 1) { bytes throws(ProtocolError) in try body(bytes, header.arg) }
    }

    /// The form of frames `start...` of a received message (``Batch/Form``).
    package static func batchForm(_ message: borrowing Multipart, from start: Int) -> Batch.Form {
        guard !message.overflowed, message.count > start else { return .notBatch }
        let frames = message.count - start
        return message.withBytes(of: start) { Batch.Form.of(first: $0, frames: frames) }
    }

    /// An ``InPlaceReader`` of no message: every message is decoded.
    package static func readNothing(_ frames: RawFrames) -> Bool? { nil }
}
