/// A run of bytes that grows, with storage of its own: one allocation (a `ManagedBuffer` of bytes).
/// For ``Batch/Writer``, which is emptied and refilled for every BATCH sent: a `[UInt8]` is emptied
/// only through the generic `replaceSubrange` (~80 instructions, whichever of
/// `removeAll(keepingCapacity:)`, `removeLast(_:)` or `removeSubrange(_:)` is asked), and each
/// `append(contentsOf:)` set up a copy of its own (~80 more than the copy).
///
/// A value: a copy shares the storage until one of them changes (copy on write). The count, the
/// capacity and the bytes' address are kept in the value beside the storage's reference, so that
/// writing and reading do not touch the storage object (reached through it, it was retained and
/// released around each use). The address is the storage's while this value holds it: storage does
/// not move, and is freed only with its last owner.
package struct GrowableBytes {
    private typealias Storage = ManagedBuffer<Void, UInt8>
    /// Nil until the first byte (an empty value allocates nothing).
    private var storage: Storage?
    /// Where `storage`'s bytes are (nil without storage).
    private var base: UnsafeMutablePointer<UInt8>?
    package private(set) var count = 0
    /// The bytes the storage has room for (0 without storage).
    package private(set) var capacity = 0

    package init() {}

    /// Appends `bytes` (copied).
    @inline(__always)
    package mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        self.write(count: bytes.count) { $0.copyMemory(from: source, byteCount: bytes.count) }
    }

    @inline(__always)
    package mutating func append(_ byte: UInt8) {
        self.write(count: 1) { $0.storeBytes(of: byte, as: UInt8.self) }
    }

    /// Appends `value` as 4 bytes, little-endian.
    @inline(__always)
    package mutating func appendUInt32(_ value: UInt32) {
        self.write(count: 4) { $0.storeBytes(of: value.littleEndian, as: UInt32.self) }
    }

    /// Appends `count` bytes that `body` writes (all of them) at the address it is given.
    @inline(__always)
    package mutating func write(count: Int, _ body: (UnsafeMutableRawPointer) -> Void) {
        precondition(count >= 0, "a negative count")
        guard count > 0 else { return }
        if self.count + count > self.capacity || !isKnownUniquelyReferenced(&self.storage) {
            self.grow(toHold: self.count + count)
        }
        // Set by `grow` (a positive count needs storage).
        guard let base = self.base else { return }
        body(UnsafeMutableRawPointer(base + self.count))
        self.count += count
    }

    /// Storage of its own with room for at least `needed` bytes, what is there copied in.
    private mutating func grow(toHold needed: Int) {
        // Doubling, from 256 bytes (a latency round trip's BATCHes are ~120).
        let capacity = Swift.max(needed, self.capacity * 2, 256)
        let grown = Storage.create(minimumCapacity: capacity) { _ in }
        let base = grown.withUnsafeMutablePointerToElements { $0 }  // stable while `grown` lives
        if let old = self.base, self.count > 0 { base.initialize(from: old, count: self.count) }
        self.storage = grown
        self.base = base
        self.capacity = capacity
    }

    /// Empties it: its storage is kept for the next bytes when it is unshared and holds at most
    /// `limit` bytes, let go otherwise.
    package mutating func removeAll(keepingCapacityUpTo limit: Int) {
        self.count = 0
        if self.capacity > limit || !isKnownUniquelyReferenced(&self.storage) {
            (self.storage, self.base, self.capacity) = (nil, nil, 0)
        }
    }

    /// The bytes where they are: valid while this value is neither changed nor dropped (the storage
    /// moves when it grows, and is freed with its last owner). See ``Batch/Writer/sendParts()``.
    package var unsafeBytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: self.base, count: self.count)
    }

    /// Calls `body` with the bytes, valid only inside the call.
    @inline(__always)
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withExtendedLifetime(self.storage) { try body(self.unsafeBytes) }
    }

    /// The bytes, copied into an array.
    package var array: [UInt8] { self.withUnsafeBytes { Array($0) } }
}
