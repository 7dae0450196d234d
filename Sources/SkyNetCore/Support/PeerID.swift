import Synchronization

/// A peer's ZeroMQ routing id, as the broker's ROUTER sockets see it.
///
/// Workers use `w-<30 hex digits>` and coordinators `c-<30 hex digits>` (``unique(prefix:)``), set
/// before they connect.
///
/// A plain 17-byte value, so that copying one costs no reference counting: the broker copies and
/// compares routing ids many times for every task (into actions, effects, task entries and outbox
/// slots), and as an array each copy was an atomic retain and release. The id's bytes are kept in one
/// of four forms:
/// - up to 16 bytes, as they are (libzmq's generated 5-byte ids);
/// - SkyNet's own ids (one byte, a dash and 30 lowercase hex digits: 32 bytes), as the byte and the 15
///   bytes the digits spell;
/// - a detached job's pseudo-peer (a zero byte and the job's 16-byte id);
/// - any other id (ZeroMQ allows up to 255 bytes), as its number in a table of such ids kept for the
///   life of the process (``LongIDs``), which holds at most ``LongIDs/limit`` of them.
package struct PeerID: Hashable, Sendable, BitwiseCopyable, CustomStringConvertible {
    /// The first and second eight bytes of the form (little-endian); zero past its end.
    @usableFromInline let a: UInt64
    @usableFromInline let b: UInt64
    /// 0...16: that many bytes as they are; or one of the forms below.
    @usableFromInline let form: UInt8

    /// The longest routing id ZeroMQ allows.
    package static let maxCount = 255

    private static let skynetForm: UInt8 = 17
    private static let jobForm: UInt8 = 18
    private static let longForm: UInt8 = 19

    private init(a: UInt64, b: UInt64, form: UInt8) {
        self.a = a
        self.b = b
        self.form = form
    }

    /// The id from its bytes (SkyNet's own, and fixed ones). Traps for more than 255 bytes or a new long
    /// id that would not fit in the table: bytes from the network or a file go through
    /// ``init(received:)``.
    package init(_ bytes: [UInt8]) {
        guard let id = bytes.withUnsafeBytes({ PeerID(received: $0) }) else {
            preconditionFailure("a routing id of \(bytes.count) bytes that cannot be kept")
        }
        self = id
    }

    /// The id of bytes received (a ROUTER's routing-id frame, a journal record), or nil when they are
    /// more than ZeroMQ allows (255 bytes), or a new long id and the table of long ids is full.
    package init?(received raw: UnsafeRawBufferPointer) {
        let count = raw.count
        guard count <= Self.maxCount else { return nil }
        if count <= 16 {
            var words: (UInt64, UInt64) = (0, 0)
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: raw) }
            self.init(a: UInt64(littleEndian: words.0), b: UInt64(littleEndian: words.1), form: UInt8(count))
            return
        }
        if count == 32, raw[1] == UInt8(ascii: "-"), let (a, b) = Self.packHex(raw) {
            self.init(a: a, b: b, form: Self.skynetForm)
            return
        }
        if count == 17, raw[0] == 0 {
            let a = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 1, as: UInt64.self))
            let b = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 9, as: UInt64.self))
            self.init(a: a, b: b, form: Self.jobForm)
            return
        }
        guard let number = LongIDs.number(of: raw) else { return nil }
        self.init(a: UInt64(number), b: 0, form: Self.longForm)
    }

    /// SkyNet's form: byte 0 and the 15 bytes spelled by bytes 2..<32 (lowercase hex), or nil.
    private static func packHex(_ raw: UnsafeRawBufferPointer) -> (UInt64, UInt64)? {
        var a = UInt64(raw[0])
        var b: UInt64 = 0
        var valid = true
        for index in 0..<15 {
            let high = Self.hexValue(raw[2 + 2 * index])
            let low = Self.hexValue(raw[3 + 2 * index])
            valid = valid && high < 16 && low < 16
            let byte = UInt64(high << 4 | low)
            if index < 7 { a |= byte << (8 * (index + 1)) } else { b |= byte << (8 * (index - 7)) }
        }
        return valid ? (a, b) : nil
    }

    /// The lowercase hex digits of `value`'s four bytes, lowest byte first and each byte's high digit
    /// first, as eight ASCII bytes to store little-endian: every nibble spread to a byte of its own,
    /// then 0x30 added to each, and 0x27 more where the nibble is over 9 (`nibble + 6` carries into
    /// bit 4 exactly then; no byte overflows into the next).
    @inline(__always)
    static func hexDigits(_ value: UInt32) -> UInt64 {
        var spread = UInt64(value)
        spread = (spread | spread << 16) & 0x0000_FFFF_0000_FFFF
        spread = (spread | spread << 8) & 0x00FF_00FF_00FF_00FF
        // Each byte now in the low half of a 16-bit lane: its high nibble to the lane's first byte,
        // its low nibble to the second.
        let nibbles = (spread >> 4) & 0x000F_000F_000F_000F | (spread & 0x000F_000F_000F_000F) << 8
        let letters = ((nibbles &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return (nibbles &+ 0x3030_3030_3030_3030 &+ letters &* 0x27).littleEndian
    }

    /// A lowercase hex digit's value, or 16 or more for any other byte.
    @inline(__always)
    private static func hexValue(_ char: UInt8) -> UInt8 {
        let digit = char &- UInt8(ascii: "0")
        if digit < 10 { return digit }
        let letter = char &- UInt8(ascii: "a")
        return letter < 6 ? letter + 10 : 16
    }

    /// An id as two words and its form byte, for a structure that lays out its fields itself
    /// (``BrokerState/TaskEntry``). Only ever made from an id (``parts``), or ``none``.
    package struct Parts {
        package let a: UInt64
        package let b: UInt64
        package let form: UInt8

        /// No id: a form no id has.
        package static let noForm: UInt8 = 0xFF
        package static var none: Parts { Parts(a: 0, b: 0, form: Self.noForm) }
    }

    package var parts: Parts { Parts(a: self.a, b: self.b, form: self.form) }

    /// Whether this id is kept in ``LongIDs`` (none of the compact forms).
    package var isInLongIDTable: Bool { self.form == Self.longForm }

    /// The id whose ``parts`` these are, or nil for ``Parts/none``.
    @inline(__always)
    package init?(_ parts: Parts) {
        guard parts.form != Parts.noForm else { return nil }
        self.init(a: parts.a, b: parts.b, form: parts.form)
    }

    /// The id's bytes, lent for the length of `body` (written out on the stack; a long id's are read
    /// from the table).
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return try Swift.withUnsafeMutableBytes(of: &words) { raw in
            guard let count = self.write(compactInto: raw) else { return try LongIDs.withBytes(of: Int(self.a), body) }
            return try body(UnsafeRawBufferPointer(rebasing: raw[..<count]))
        }
    }

    /// The most bytes an id not kept in ``LongIDs`` has (SkyNet's form).
    package static let compactMaxCount = 32

    /// Writes the id's bytes into `buffer` (room for ``compactMaxCount`` bytes) and returns how many;
    /// nil for an id kept in ``LongIDs``, whose bytes are in the table (``withUnsafeBytes(_:)``).
    /// Not generic, unlike ``withUnsafeBytes(_:)``: the outbox spells a routed peer's id for every
    /// BATCH it sends, and through the generic function from another module each spelling also went
    /// through the standard library's generic `withUnsafeMutableBytes(of:)` and two closure thunks
    /// (~130 instructions on top of the ~80 of the spelling).
    package func write(compactInto buffer: UnsafeMutableRawBufferPointer) -> Int? {
        precondition(buffer.count >= Self.compactMaxCount, "room for a compact id")
        switch self.form {
        case 0...16:
            buffer.storeBytes(of: self.a.littleEndian, toByteOffset: 0, as: UInt64.self)
            buffer.storeBytes(of: self.b.littleEndian, toByteOffset: 8, as: UInt64.self)
            return Int(self.form)
        case Self.skynetForm:
            // Written out for every message sent to a peer: eight digits at a time (``hexDigits(_:)``),
            // ~81 instructions a send where a table lookup a byte took ~276. Bytes 1..<8 of `a` go to
            // 2..<16 (their last, zero, byte's digits to 16 and 17), then `b`'s 8 to 16..<32.
            let rest = self.a >> 8
            buffer.storeBytes(of: Self.hexDigits(UInt32(truncatingIfNeeded: rest)), toByteOffset: 2, as: UInt64.self)
            buffer.storeBytes(
                of: Self.hexDigits(UInt32(truncatingIfNeeded: rest >> 32)),
                toByteOffset: 10,
                as: UInt64.self
            )
            buffer.storeBytes(of: Self.hexDigits(UInt32(truncatingIfNeeded: self.b)), toByteOffset: 16, as: UInt64.self)
            buffer.storeBytes(
                of: Self.hexDigits(UInt32(truncatingIfNeeded: self.b >> 32)),
                toByteOffset: 24,
                as: UInt64.self
            )
            buffer[0] = UInt8(truncatingIfNeeded: self.a)
            buffer[1] = UInt8(ascii: "-")
            return 32
        case Self.jobForm:
            buffer[0] = 0
            buffer.storeBytes(of: self.a.littleEndian, toByteOffset: 1, as: UInt64.self)
            buffer.storeBytes(of: self.b.littleEndian, toByteOffset: 9, as: UInt64.self)
            return 17
        default:
            return nil
        }
    }

    /// The owner of a detached job's tasks at the broker: a zero byte and the job's id. A ZeroMQ
    /// peer's routing id never starts with a zero byte, so it cannot be confused with a connected
    /// coordinator. (In the job form the words hold the id's bytes as read little-endian: its halves
    /// byte-swapped.)
    package static func job(_ id: TaskID) -> PeerID {
        PeerID(a: id.high.byteSwapped, b: id.low.byteSwapped, form: Self.jobForm)
    }

    /// The job this peer stands for, when it is a job's owner.
    package var job: TaskID? {
        self.form == Self.jobForm ? TaskID(high: self.a.byteSwapped, low: self.b.byteSwapped) : nil
    }

    /// The id's bytes, in a new array.
    package var bytes: [UInt8] { self.withUnsafeBytes { Array($0) } }

    /// The first byte (the `w`, `c` or `j` of SkyNet's ids), if any.
    package var first: UInt8? {
        switch self.form {
        case 0: nil
        case 1...16, Self.skynetForm: UInt8(truncatingIfNeeded: self.a)
        case Self.jobForm: 0
        default: self.withUnsafeBytes { $0.first }
        }
    }

    /// Each form's value stands for one byte string, so equal values are equal ids. Inlinable: the
    /// broker's outbox (another module) compares ids for every message it gathers, and the
    /// synthesized `==` was a call through the conformance's witness table there.
    @inlinable
    package static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        lhs.a == rhs.a && lhs.b == rhs.b && lhs.form == rhs.form
    }

    /// The id's hash in a `Dictionary` or `Set` (``FastHash``: keyed, far cheaper than SipHash; the
    /// broker looks routing ids up several times per message). Inlinable, as ``==(_:_:)``.
    @inlinable
    package func _rawHashValue(seed: Int) -> Int {
        FastHash.hash(self.a, self.b ^ UInt64(self.form) &* 0x9E37_79B9_7F4A_7C15, seed: seed)
    }

    /// A new unique routing id with a prefix, e.g. `w-0f3c…`: the prefix, a dash and the last 15 bytes
    /// of a random task id in hex (114 random bits). With a one-letter prefix that is 32 bytes, which
    /// libzmq keeps inside its message structure (up to 33 bytes; a longer id costs an allocation for
    /// every message sent or received).
    package static func unique(prefix: String) -> PeerID {
        let digits = Array("0123456789abcdef".utf8)
        var bytes = Array(prefix.utf8)
        bytes.append(UInt8(ascii: "-"))
        for byte in TaskID.random().bytes.dropFirst() {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0xF)])
        }
        return PeerID(bytes)
    }

    /// Printable ids as text; others (libzmq's generated ids) as hex.
    package var description: String {
        let bytes = self.bytes
        if !bytes.isEmpty, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            return String(decoding: bytes, as: UTF8.self)
        }
        return "0x" + bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
    }

    /// Routing ids in none of the compact forms (17 to 255 bytes, other than SkyNet's and a job's),
    /// numbered in the order first seen and kept for the life of the process, so that a ``PeerID``
    /// stays a plain value. SkyNet's own peers never need the table; at most ``limit`` ids are kept
    /// (about 20 MB at worst), after which the broker refuses messages from peers with new ones.
    package enum LongIDs {
        /// The most ids kept.
        package static let limit = 65_536

        private static let table = Mutex(LongIDTable(limit: Self.limit))

        /// The number of `raw`'s id, taken if it is new; nil when the table is full.
        static func number(of raw: UnsafeRawBufferPointer) -> Int? {
            let bytes = Array(raw)
            return Self.table.withLock { $0.number(of: bytes) }
        }

        static func withBytes<R>(of number: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            let bytes = Self.table.withLock { $0.bytes(of: number) }
            return try bytes.withUnsafeBytes(body)
        }

        /// How many ids the table holds.
        package static var count: Int { Self.table.withLock { $0.count } }
    }
}

/// Byte strings numbered in the order first seen, up to a limit (``PeerID/LongIDs``' table).
package struct LongIDTable: ~Copyable {
    private let limit: Int
    private var ids: [[UInt8]] = []
    private var numbers: [[UInt8]: Int] = [:]

    package init(limit: Int) { self.limit = limit }

    /// The number of `bytes`, taken if they are new; nil when they are new and the table is full.
    package mutating func number(of bytes: [UInt8]) -> Int? {
        if let number = self.numbers[bytes] { return number }
        guard self.ids.count < self.limit else { return nil }
        self.ids.append(bytes)
        self.numbers[bytes] = self.ids.count - 1
        return self.ids.count - 1
    }

    /// The bytes numbered `number`.
    package func bytes(of number: Int) -> [UInt8] { self.ids[number] }

    package var count: Int { self.ids.count }
}

extension String {
    package func leftPadded(to width: Int, with pad: Character = "0") -> String {
        self.count >= width ? self : String(repeating: pad, count: width - self.count) + self
    }
}
