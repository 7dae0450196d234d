import Glibc
import Synchronization

/// The 16-byte identity of a ``ScanTask``: a random (version 4) UUID.
public struct TaskID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The UUID's first and last eight bytes, big-endian, so the order matches the text form.
    public let high: UInt64
    /// The low 64 bits.
    public let low: UInt64

    /// The id's hash in a `Dictionary` or `Set` (``FastHash``: keyed, far cheaper than SipHash; the
    /// broker looks task ids up several times per task).
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

    /// Appends the UUID's text (lowercase, 36 bytes) to `out`: no table of digits or array of the
    /// id's bytes made per call, as before.
    package func appendText(to out: inout [UInt8]) {
        for index in 0..<16 {
            if index == 4 || index == 6 || index == 8 || index == 10 { out.append(UInt8(ascii: "-")) }
            let half = index < 8 ? self.high : self.low
            let byte = UInt8(truncatingIfNeeded: half >> UInt64(56 - 8 * (index & 7)))
            out.append(Self.hexDigit(byte >> 4))
            out.append(Self.hexDigit(byte & 0xF))
        }
    }

    @inline(__always)
    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
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
