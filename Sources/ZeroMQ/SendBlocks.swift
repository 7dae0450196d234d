import CZMQ
import Synchronization

/// Blocks for the content of the small whole-frame messages ``Socket/send(routing:joining:_:)`` sends
/// (a BATCH for one peer), kept between sends.
///
/// Copied into a message made with `zmq_msg_init_size`, a frame longer than 33 bytes is a `malloc`ed
/// block that libzmq's I/O thread frees once it has written it out. The sending thread's malloc
/// cache then never holds one of that size (each free lands in the I/O thread's), so every send took
/// the allocator's slow path: ~300 instructions on the reactor and ~150 on the I/O thread, three
/// times a latency round trip on the cluster's reactor and once on the coordinator's (DESIGN.md §3,
/// "Twenty-third round"). A block taken here goes to libzmq with `zmq_msg_init_data` and comes back
/// through ``release`` (on whichever thread drops the message), so it is reused. libzmq still
/// allocates its small record of the message, but the I/O thread's frees of those hand them back in
/// bulk.
///
/// Ownership: a block is the caller's from ``take()`` until it is given to libzmq (or back with
/// ``give(_:)``); libzmq's from then until it calls ``release`` exactly once (when the message is
/// closed, sent or not); then the pool's. The process's pool (``shared``) is never freed; any other is
/// retained by each message made over its blocks (the message's `hint`), so a pool outlives every
/// such message, whatever becomes of the socket.
final class SendBlocks: Sendable {
    /// The process's pool, which sockets use unless given another (tests).
    static let shared = SendBlocks(blockSize: 256, keptBlocks: 1024, forever: true)

    /// The size of each block: messages of at most this many bytes use one.
    let blockSize: Int
    /// Most blocks kept; one given back beyond this is freed.
    let keptBlocks: Int

    /// The spare blocks' addresses, a stack in storage allocated once (an array's uniqueness and
    /// bounds checks cost as much as the rest of a take or give). Addresses, not pointers: unsafe
    /// pointers are not `Sendable`, and a block here belongs to the pool alone (see above), so
    /// handing one across threads through the lock is safe.
    private struct Spare: ~Copyable {
        let addresses: UnsafeMutablePointer<UInt>
        var count = 0

        init(capacity: Int) { self.addresses = .allocate(capacity: capacity) }

        deinit {
            for index in 0..<self.count { UnsafeMutableRawPointer(bitPattern: self.addresses[index])?.deallocate() }
            self.addresses.deallocate()
        }
    }
    private let spare: Mutex<Spare>
    /// Whether this is ``shared``, which lives as long as the process: its messages carry no retain
    /// of it (one fewer retain and release a send).
    private let forever: Bool

    /// A pool of its own (tests), which each message made over its blocks retains.
    convenience init(blockSize: Int, keptBlocks: Int) {
        self.init(blockSize: blockSize, keptBlocks: keptBlocks, forever: false)
    }

    private init(blockSize: Int, keptBlocks: Int, forever: Bool) {
        precondition(blockSize > 0 && keptBlocks >= 0)
        self.blockSize = blockSize
        self.keptBlocks = keptBlocks
        self.spare = Mutex(Spare(capacity: keptBlocks))
        self.forever = forever
    }

    /// A block of ``blockSize`` bytes, the caller's until it is given to libzmq or back.
    func take() -> UnsafeMutableRawPointer {
        let address = self.spare.withLock { spare -> UInt in
            guard spare.count > 0 else { return 0 }
            spare.count -= 1
            return spare.addresses[spare.count]
        }
        return UnsafeMutableRawPointer(bitPattern: address) ?? .allocate(byteCount: self.blockSize, alignment: 16)
    }

    /// Takes back a block that ``take()`` gave out; it is freed when the pool is full.
    func give(_ block: UnsafeMutableRawPointer) {
        let address = UInt(bitPattern: block)
        let kept = self.spare.withLock { spare in
            guard spare.count < self.keptBlocks else { return false }
            spare.addresses[spare.count] = address
            spare.count += 1
            return true
        }
        if !kept { block.deallocate() }
    }

    /// Makes `message` over a block holding `head` then `body` (together at most ``blockSize``
    /// bytes). On success the block is libzmq's, and the message holds a retain of the pool unless it
    /// is ``shared``.
    func initialize(
        _ message: UnsafeMutablePointer<zmq_msg_t>,
        joining head: UnsafeRawBufferPointer,
        _ body: UnsafeRawBufferPointer
    ) throws(ZMQError) {
        let size = head.count + body.count
        precondition(size <= self.blockSize, "a message over a send block fits in it")
        let block = self.take()
        if let base = head.baseAddress { block.copyMemory(from: base, byteCount: head.count) }
        if let base = body.baseAddress { (block + head.count).copyMemory(from: base, byteCount: body.count) }
        let hint = self.forever ? nil : Unmanaged.passRetained(self)
        guard zmq_msg_init_data(message, block, size, Self.release, hint?.toOpaque()) == 0 else {
            hint?.release()
            self.give(block)
            throw ZMQError.last("zmq_msg_init_data")
        }
    }

    /// What libzmq calls when a message made over a block is closed: the block goes back to the pool
    /// the message's hint holds, and that retain is given back; without a hint, to ``shared``.
    private static let release: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void = {
        data,
        hint in
        guard let data else { return }
        if let hint {
            Unmanaged<SendBlocks>.fromOpaque(hint).takeRetainedValue().give(data)
        } else {
            SendBlocks.shared.give(data)
        }
    }

    /// How many blocks are spare now (for tests).
    var spareCount: Int { self.spare.withLock { $0.count } }
}
