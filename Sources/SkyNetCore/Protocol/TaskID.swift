import Glibc
import Synchronization

/// The 16-byte identity of a ``ScanTask``: a random (version 4) UUID.
public struct TaskID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The UUID's first and last eight bytes, big-endian, so the order matches the text form.
    public let high: UInt64
    /// The low 64 bits.
    public let low: UInt64

    /// The id's hash in a `Dictionary` or `Set` (``FastHash``: keyed, far cheaper than SipHash; the
    /// broker looks task ids up several times per task). Inlinable, so that tables keyed by task ids
    /// in other modules hash without a call through the conformance.
    @inlinable
    public func _rawHashValue(seed: Int) -> Int { FastHash.hash(self.high, self.low, seed: seed) }

    /// The all-zero id, used in connection-level commands.
    public static let zero = TaskID(high: 0, low: 0)

    /// An id from its two halves.
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The id from its 16 bytes, big-endian (as ``bytes`` gives them).
    package init(bytes: [UInt8]) {
        precondition(bytes.count == 16, "a task id is 16 bytes")
        var high: UInt64 = 0
        var low: UInt64 = 0
        for i in 0..<8 { high = high << 8 | UInt64(bytes[i]) }
        for i in 8..<16 { low = low << 8 | UInt64(bytes[i]) }
        self.init(high: high, low: low)
    }

    /// A new random id, from the system's generator (drawn 512 bytes at a time, see ``IDEntropy``).
    public static func random() -> TaskID {
        idEntropy.withLock { TaskID.random(using: &$0) }
    }

    /// A new random id from `generator` (deterministic in tests).
    public static func random(using generator: inout some RandomNumberGenerator) -> TaskID {
        let high = (generator.next() & ~0xF000) | 0x4000  // version 4
        let low = (generator.next() & ~(0xC << 60)) | (0x8 << 60)  // RFC 4122 variant
        return TaskID(high: high, low: low)
    }

    /// Parses the 36-character text form (`8-4-4-4-12` hex digits).
    public init?(_ text: some StringProtocol) {
        let hex = text.utf8.filter { $0 != UInt8(ascii: "-") }
        guard text.utf8.count == 36, hex.count == 32 else { return nil }
        for (offset, char) in text.utf8.enumerated() where [8, 13, 18, 23].contains(offset) {
            guard char == UInt8(ascii: "-") else { return nil }
        }
        var values: [UInt64] = [0, 0]
        for (index, char) in hex.enumerated() {
            guard let digit = Self.hexValue(char) else { return nil }
            values[index / 16] = values[index / 16] << 4 | UInt64(digit)
        }
        self.init(high: values[0], low: values[1])
    }

    /// The 16 bytes, big-endian.
    public var bytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(16)
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: self.high >> UInt64(shift)))
        }
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: self.low >> UInt64(shift)))
        }
        return out
    }

    /// The UUID's text, lowercase.
    public var description: String {
        var out = [UInt8]()
        out.reserveCapacity(36)
        self.appendText(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the UUID's text (lowercase, 36 bytes) to `out`: its digits made eight at a time
    /// (``hexDigits(_:)``), laid out on the stack and appended in one go (`skynet submit` prints one
    /// per result: a byte at a time, 36 appends cost ~900 instructions).
    package func appendText(to out: inout [UInt8]) {
        self.withText { out.append(contentsOf: $0) }
    }

    /// Calls `body` with the UUID's text (``appendText(to:)``'s 36 bytes, on the stack).
    package func withText<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        var text: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &text) { bytes in
            // 8-4-4-4-12: the high half's digits at 0 and 9 (its last four moved on to 14), the low
            // half's at 19, 24 and 28; dashes between.
            let highDigits = Self.hexDigits(UInt32(truncatingIfNeeded: self.high))
            let lowDigits = Self.hexDigits(UInt32(truncatingIfNeeded: self.low >> 32))
            bytes.storeBytes(
                of: Self.hexDigits(UInt32(truncatingIfNeeded: self.high >> 32)).littleEndian,
                toByteOffset: 0,
                as: UInt64.self
            )
            bytes.storeBytes(of: highDigits.littleEndian, toByteOffset: 9, as: UInt64.self)
            bytes.storeBytes(
                of: UInt32(truncatingIfNeeded: highDigits >> 32).littleEndian,
                toByteOffset: 14,
                as: UInt32.self
            )
            bytes.storeBytes(of: UInt32(truncatingIfNeeded: lowDigits).littleEndian, toByteOffset: 19, as: UInt32.self)
            bytes.storeBytes(
                of: UInt32(truncatingIfNeeded: lowDigits >> 32).littleEndian,
                toByteOffset: 24,
                as: UInt32.self
            )
            bytes.storeBytes(
                of: Self.hexDigits(UInt32(truncatingIfNeeded: self.low)).littleEndian,
                toByteOffset: 28,
                as: UInt64.self
            )
            for dash in [8, 13, 18, 23] { bytes[dash] = UInt8(ascii: "-") }
        }
        return withUnsafeBytes(of: &text) { body(UnsafeRawBufferPointer(rebasing: $0[0..<36])) }
    }

    /// The eight lowercase hex digits of `value` as the bytes of a word, the most significant digit
    /// in its lowest byte (stored little-endian, they read in order): each nibble spread to a byte of
    /// its own, then made a digit (`0`–`9` or `a`–`f`) in every byte at once.
    @inline(__always)
    static func hexDigits(_ value: UInt32) -> UInt64 {
        var nibbles = UInt64(value)
        nibbles = (nibbles & 0xFFFF_0000) << 16 | nibbles & 0xFFFF
        nibbles = (nibbles & 0x0000_FF00_0000_FF00) << 8 | nibbles & 0x0000_00FF_0000_00FF
        nibbles = (nibbles & 0x00F0_00F0_00F0_00F0) << 4 | nibbles & 0x000F_000F_000F_000F
        // Byte i holds nibble i (the least significant first). A nibble of 10 or more gets 39 more
        // ("a" − "0" − 10); no byte carries into the next (at most 15 + 48 + 39).
        let letters = ((nibbles &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return (nibbles &+ 0x3030_3030_3030_3030 &+ letters &* 39).byteSwapped
    }

    /// Ordered by the high half, then the low.
    public static func < (lhs: TaskID, rhs: TaskID) -> Bool {
        (lhs.high, lhs.low) < (rhs.high, rhs.low)
    }

    private static func hexValue(_ char: UInt8) -> UInt8? {
        switch char {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): char - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): char - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): char - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// The kernel's random bytes (`/dev/urandom`, the pool `SystemRandomNumberGenerator` draws from),
/// read 512 bytes at a time: a coordinator submitting 20,000 tasks makes about 2,000 system calls
/// for their ids instead of 40,000 (one `getrandom` per 8 bytes). The bytes are as unpredictable as
/// the generator's; they are only buffered.
package struct IDEntropy: RandomNumberGenerator {
    private var words = [UInt64](repeating: 0, count: 64)
    private var position = 64

    package mutating func next() -> UInt64 {
        if self.position == self.words.count { self.refill() }
        defer { self.position += 1 }
        return self.words[self.position]
    }

    private mutating func refill() {
        let fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        let filled = self.words.withUnsafeMutableBytes { buffer -> Int in
            guard fd >= 0 else { return 0 }
            var filled = 0
            while filled < buffer.count {
                let count = read(fd, buffer.baseAddress! + filled, buffer.count - filled)
                if count > 0 {
                    filled += count
                } else if count < 0 && errno == EINTR {
                    continue
                } else {
                    break
                }
            }
            return filled
        }
        if fd >= 0 { close(fd) }
        if filled < self.words.count * 8 {
            // No /dev/urandom (a bare chroot?): the standard generator finds another way.
            var system = SystemRandomNumberGenerator()
            for index in (filled / 8)..<self.words.count { self.words[index] = system.next() }
        }
        self.position = 0
    }
}

/// The process's id entropy. Not shared across a fork (nothing here forks without exec).
private let idEntropy = Mutex(IDEntropy())

extension TaskID {
    /// Ids for one job's tasks, numbered from 0: a random id whose low 32 bits are replaced by each
    /// task's number (90 random bits a job, so as unique as random ids). The typed API matches results
    /// to inputs by them, and a coordinator's ``RetryLedger`` finds such a task by its number, without
    /// a table; `skynet submit` numbers its tasks so.
    package struct Run: Sendable {
        package let base = TaskID.random()
        static let mask: UInt64 = 0xFFFF_FFFF

        package init() {}

        /// The id of task number `index` (0 up to 2³² − 1).
        package func id(_ index: Int) -> TaskID {
            precondition(index >= 0 && UInt64(index) <= Self.mask, "a run numbers up to 2^32 tasks")
            return TaskID(high: self.base.high, low: self.base.low & ~Self.mask | UInt64(index))
        }

        /// The number of task `id`, when it is one of this run's.
        package func index(of id: TaskID) -> Int? {
            guard id.high == self.base.high, id.low & ~Self.mask == self.base.low & ~Self.mask else { return nil }
            return Int(id.low & Self.mask)
        }
    }
}
