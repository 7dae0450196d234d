import CZMQ

/// One ZeroMQ message frame: an owned `zmq_msg_t`.
///
/// `~Copyable`, because a `zmq_msg_t` has exactly one owner: it is closed once, in `deinit`, unless
/// sending it handed its content to libzmq. A `zmq_msg_t` holds no pointer into itself, so moving the
/// struct is a real move; never keep a pointer from ``withUnsafeBytes(_:)`` past the closure.
public struct Frame: ~Copyable {
    var raw: zmq_msg_t

    /// An empty frame, ready to receive into.
    public init() {
        self.raw = zmq_msg_t()
        zmq_msg_init(&self.raw)
    }

    /// A frame holding a copy of `bytes` (frames of 33 bytes or less are stored inline, without malloc).
    public init(copying bytes: UnsafeRawBufferPointer) {
        self.raw = zmq_msg_t()
        if zmq_msg_init_size(&self.raw, bytes.count) != 0 {
            // Only ENOMEM can fail here; an empty frame is the safe fallback and the send will be short.
            zmq_msg_init(&self.raw)
            return
        }
        if let base = bytes.baseAddress, bytes.count > 0 {
            zmq_msg_data(&self.raw).copyMemory(from: base, byteCount: bytes.count)
        }
    }

    /// A frame holding a copy of `bytes`.
    public init(_ bytes: [UInt8]) {
        self.raw = zmq_msg_t()
        if zmq_msg_init_size(&self.raw, bytes.count) != 0 {
            zmq_msg_init(&self.raw)
            return
        }
        if !bytes.isEmpty {
            let data = zmq_msg_data(&self.raw)!
            bytes.withUnsafeBytes { data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        }
    }

    deinit {
        var m = self.raw
        zmq_msg_close(&m)
    }

    /// The frame's size in bytes.
    public var count: Int {
        mutating get { zmq_msg_size(&self.raw) }
    }

    /// Whether more frames of the same message follow this one (valid after a receive).
    public var hasMore: Bool {
        mutating get { zmq_msg_more(&self.raw) != 0 }
    }

    /// Calls `body` with the frame's bytes, valid only inside the closure.
    public mutating func withUnsafeBytes<R, E: Error>(
        _ body: (UnsafeRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        let size = zmq_msg_size(&self.raw)
        let data = zmq_msg_data(&self.raw)
        return try body(UnsafeRawBufferPointer(start: size == 0 ? nil : data, count: size))
    }

    /// A copy of the frame's bytes.
    public mutating func bytes() -> [UInt8] {
        self.withUnsafeBytes { Array($0) }
    }
}
