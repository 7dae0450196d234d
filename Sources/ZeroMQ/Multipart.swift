import CZMQ

/// A received multipart message: a fixed, owned array of `zmq_msg_t` frames.
///
/// `~Copyable`, because a `zmq_msg_t` has exactly one owner: each kept frame is closed once, when the
/// message is dropped, unless sending it handed its content to libzmq. A message with more frames
/// than the receiver's limit is still drained from the socket (multipart delivery is atomic, so the
/// rest is already there), but only the first `limit` frames are kept and ``overflowed`` is set, so
/// a hostile peer cannot make a receiver allocate without bound.
public struct Multipart: ~Copyable {
    /// `capacity` frames, then one scratch slot that receives (and closes) frames past the limit; in
    /// the same allocation after them, ``views`` (``allocateStorage(capacity:)``).
    private let storage: UnsafeMutablePointer<zmq_msg_t>
    /// The bytes of each kept frame, noted as it is received: read through `zmq_msg_data` and
    /// `zmq_msg_size` at every use, a frame cost ~70 instructions each time it was looked at, and the
    /// broker and worker look at most frames twice (its form, then its messages; a ROUTER's routing
    /// frame, then its peer): ~500 a latency round trip on the cluster's reactor. A frame's bytes stay
    /// where they are while it is kept (a small frame's are inside its `zmq_msg_t`, which does not
    /// move); a frame sent on (``takeFrame(_:)``) has its view emptied (``frameSent(_:)``).
    @usableFromInline let views: UnsafeMutablePointer<UnsafeRawBufferPointer>
    private let capacity: Int
    /// Where the storage goes back to when the message is dropped (nil: it is freed). Held as one
    /// retain taken in `init` and given back in `deinit` (a message is not copyable: both run once).
    /// Not as a strong optional reference: the compiler dropped that field after `deinit` through
    /// `Optional`'s generic value witness (~65 instructions, on each of the ~6 messages and empty
    /// receives a latency round trip makes on the cluster's reactor).
    private let pool: Unmanaged<FrameStoragePool>?
    /// The number of frames kept.
    public private(set) var count: Int
    /// The message had more frames than could be kept.
    public private(set) var overflowed: Bool
    /// The total size of all frames received, including dropped ones.
    public private(set) var totalBytes: Int

    @inline(__always)
    init(capacity: Int, pool: FrameStoragePool? = nil) {
        self.capacity = max(1, capacity)
        self.pool = pool.map { Unmanaged.passRetained($0) }
        self.storage = pool?.take(capacity: self.capacity) ?? Self.allocateStorage(capacity: self.capacity)
        self.views = Self.views(of: self.storage, capacity: self.capacity)
        self.count = 0
        self.overflowed = false
        self.totalBytes = 0
    }

    deinit {
        for i in 0..<self.count { zmq_msg_close(self.storage + i) }
        if let pool {
            pool.takeRetainedValue().give(self.storage, capacity: self.capacity)
        } else {
            self.storage.deallocate()
        }
    }

    /// Storage for a message of up to `capacity` frames, in one allocation: `capacity + 1` `zmq_msg_t`
    /// slots (the last the scratch slot), then `capacity` views (``views``). Freed, or kept by a
    /// ``FrameStoragePool``, through its start.
    static func allocateStorage(capacity: Int) -> UnsafeMutablePointer<zmq_msg_t> {
        let messages = (capacity + 1) * MemoryLayout<zmq_msg_t>.stride
        let raw = UnsafeMutableRawPointer.allocate(
            byteCount: messages + capacity * MemoryLayout<UnsafeRawBufferPointer>.stride,
            alignment: max(MemoryLayout<zmq_msg_t>.alignment, MemoryLayout<UnsafeRawBufferPointer>.alignment)
        )
        (raw + messages).bindMemory(to: UnsafeRawBufferPointer.self, capacity: capacity)
        return raw.bindMemory(to: zmq_msg_t.self, capacity: capacity + 1)
    }

    /// The views in storage from ``allocateStorage(capacity:)``.
    @inline(__always)
    static func views(
        of storage: UnsafeMutablePointer<zmq_msg_t>,
        capacity: Int
    ) -> UnsafeMutablePointer<UnsafeRawBufferPointer> {
        (UnsafeMutableRawPointer(storage) + (capacity + 1) * MemoryLayout<zmq_msg_t>.stride)
            .assumingMemoryBound(to: UnsafeRawBufferPointer.self)
    }

    /// Receives one whole message. Returns nil when nothing is waiting (`EAGAIN` with `dontWait`).
    static func receive(
        from socket: UnsafeMutableRawPointer,
        limit: Int,
        dontWait: Bool,
        pool: FrameStoragePool? = nil
    ) throws(ZMQError) -> Multipart? {
        // Straight into the message's storage, the first frame too. A receive that does not wait and
        // finds nothing then takes storage from the pool (and retains it) only to give it back (~60
        // instructions), but that happens once a drain at most: a reactor reads a busy socket until
        // it finds nothing, and a quiet one only once a turn (``Socket/receiveBatch(limit:_:)``), so
        // none of a latency round trip's five receives on the cluster's reactor finds nothing. Landing
        // the first frame on the stack and moving it into its slot cost ~60 on every message.
        var message = Multipart(capacity: limit, pool: pool)
        var first = true
        while true {
            // Past the limit, frames land in the scratch slot after the kept ones and are closed at once.
            let slot = message.storage + min(message.count, message.capacity)
            zmq_msg_init(slot)
            var rc: Int32
            if first && dontWait {
                rc = zmq_msg_recv(slot, socket, ZMQ_DONTWAIT)
            } else {
                // Later frames of a multipart message are already queued: libzmq delivers messages whole.
                repeat {
                    rc = zmq_msg_recv(slot, socket, 0)
                } while rc < 0 && zmq_errno() == EINTR && !first
            }
            if rc < 0 {
                let error = ZMQError.last("receive")
                zmq_msg_close(slot)
                if first && error.isWouldBlock { return nil }  // nothing waiting, or a receive timeout
                throw error
            }
            first = false
            message.totalBytes += Int(rc)
            let more = zmq_msg_more(slot) != 0
            if message.count < message.capacity {
                // The size is the receive's answer, unless libzmq clamped it (a frame of 2 GB or more).
                let size = rc < Int32.max ? Int(rc) : zmq_msg_size(slot)
                message.views[message.count] = UnsafeRawBufferPointer(
                    start: size == 0 ? nil : zmq_msg_data(slot),
                    count: size
                )
                message.count += 1
            } else {
                message.overflowed = true
                zmq_msg_close(slot)
            }
            if !more { return message }
        }
    }

    /// The size of frame `index`.
    public func size(of index: Int) -> Int {
        precondition(index >= 0 && index < self.count, "frame index out of range")
        return self.views[index].count
    }

    /// Calls `body` with the bytes of frame `index`, valid only inside the closure.
    @inlinable
    public func withBytes<R, E: Error>(
        of index: Int,
        _ body: (UnsafeRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        try body(self.frameBytes(index))
    }

    /// Calls `body` with the bytes of frames `start...`, read in place and valid only inside the
    /// closure (the list of them is on the stack: nothing is allocated).
    @inlinable
    public func withFrames<R, E: Error>(
        from start: Int = 0,
        _ body: (UnsafeBufferPointer<UnsafeRawBufferPointer>) throws(E) -> R
    ) throws(E) -> R {
        precondition(start >= 0 && start <= self.count, "frame index out of range")
        let count = self.count - start
        let result = withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: count) { frames in
            for i in 0..<count { frames.initializeElement(at: i, to: self.frameBytes(start + i)) }
            return Result { () throws(E) -> R in try body(UnsafeBufferPointer(frames)) }
        }
        return try result.get()
    }

    /// The bytes of frame `index`, valid while the message is (as noted when it was received).
    @inlinable
    func frameBytes(_ index: Int) -> UnsafeRawBufferPointer {
        precondition(index >= 0 && index < self.count, "frame index out of range")
        return self.views[index]
    }

    /// A copy of frame `index`.
    public func bytes(of index: Int) -> [UInt8] {
        self.withBytes(of: index) { Array($0) }
    }

    /// Copies of all frames from `start` on.
    public func allBytes(from start: Int = 0) -> [[UInt8]] {
        guard start < self.count else { return [] }
        return (start..<self.count).map { self.bytes(of: $0) }
    }

    /// Frame `index`'s `zmq_msg_t`, to read its metadata (valid while the message is).
    func frameMessage(_ index: Int) -> UnsafeMutablePointer<zmq_msg_t> { self.storage + index }

    /// Frame `index`, to be sent on (`zmq_msg_send` moves its content out when it succeeds: then
    /// ``frameSent(_:)``; a send that fails leaves it as it was).
    mutating func takeFrame(_ index: Int) -> UnsafeMutablePointer<zmq_msg_t> {
        precondition(index >= 0 && index < self.count, "frame index out of range")
        return self.storage + index
    }

    /// Frame `index` was sent on: its slot is an empty frame now, and so is its view (the bytes it
    /// showed are libzmq's).
    mutating func frameSent(_ index: Int) {
        precondition(index >= 0 && index < self.count, "frame index out of range")
        self.views[index] = UnsafeRawBufferPointer(start: nil, count: 0)
    }
}

/// Keeps the frame storage of the last message a socket received, for its next one: a receive then
/// allocates nothing. A storage for `capacity` frames has `capacity + 1` slots (the scratch slot),
/// then the frames' views (``Multipart/allocateStorage(capacity:)``). Used by one thread only, like
/// the socket that owns it (not `Sendable`); each storage belongs to one ``Multipart`` at a time,
/// which gives it back when it is dropped.
final class FrameStoragePool {
    /// The spare storage and its capacity, in one stored value: every use of a class's stored
    /// property is a dynamic exclusivity check in a release build (~65 instructions), and a message
    /// received made six, three as its storage was taken and three as it was given back (~1,500
    /// instructions a latency round trip across the broker's and the worker's sockets).
    #if DEBUG
    private var spare: (storage: UnsafeMutablePointer<zmq_msg_t>, capacity: Int)?
    #else
    // Release builds skip the check (docs/DESIGN.md §3, "Unchecked exclusivity"); debug builds keep
    // it. Unchecked: used by its socket's thread only, and `take` and `give` touch only it and call
    // nothing.
    @exclusivity(unchecked) private var spare: (storage: UnsafeMutablePointer<zmq_msg_t>, capacity: Int)?
    #endif

    func take(capacity: Int) -> UnsafeMutablePointer<zmq_msg_t>? {
        guard let spare = self.spare, spare.capacity == capacity else { return nil }
        self.spare = nil
        return spare.storage
    }

    func give(_ storage: UnsafeMutablePointer<zmq_msg_t>, capacity: Int) {
        if self.spare == nil {
            self.spare = (storage, capacity)
        } else {
            storage.deallocate()
        }
    }

    deinit { self.spare?.storage.deallocate() }
}
