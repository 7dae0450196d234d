/// The input of a sector scan: 20 bytes, little-endian (sector i64, work ns u64, failEvery u32), and
/// a 21st byte of flags when any is set (bit 0: the work spins the CPU instead of sleeping).
public struct SectorInput: Sendable, Equatable {
    /// The sector number.
    public var sector: Int64
    /// How long a scan takes.
    public var work: Duration
    /// Every this many attempts fails (0: never).
    public var failEvery: UInt32
    /// The work is CPU-bound (a busy loop that checks for cancellation) rather than a sleep.
    public var cpuBound: Bool

    /// An input.
    public init(sector: Int64, work: Duration, failEvery: UInt32, cpuBound: Bool = false) {
        self.sector = sector
        self.work = work
        self.failEvery = failEvery
        self.cpuBound = cpuBound
    }

    /// The 20 or 21 bytes, laid out on the stack and copied into the array in one go (`skynet submit`
    /// makes one per task: appended field by field, through the generic `append(contentsOf:)`, they
    /// cost ~300 instructions more; an array made empty and filled in place was allocated through
    /// the standard library's unspecialized path, ~700 more, with a type metadata lookup).
    public func encode() -> [UInt8] {
        var raw: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &raw) { bytes in
            bytes.storeBytes(of: UInt64(bitPattern: self.sector).littleEndian, toByteOffset: 0, as: UInt64.self)
            // No work (the no-op tasks of a benchmark) skips the conversion (~32 instructions a task).
            let nanoseconds = self.work == .zero ? 0 : UInt64(clamping: self.work.microseconds) &* 1000
            bytes.storeBytes(of: nanoseconds.littleEndian, toByteOffset: 8, as: UInt64.self)
            bytes.storeBytes(of: self.failEvery.littleEndian, toByteOffset: 16, as: UInt32.self)
            if self.cpuBound { bytes[20] = 1 }
        }
        return withUnsafeBytes(of: &raw) { Array(UnsafeRawBufferPointer(rebasing: $0[0..<(self.cpuBound ? 21 : 20)])) }
    }

    /// Parses an input.
    /// - Throws: ``ProtocolError`` for any other length or unknown flags.
    public static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> SectorInput {
        try Self.read(ByteReader(bytes, what: "sector input"))
    }

    /// The sector of the input `bytes` hold when ``decode(_:)-([UInt8])`` reads them, else nil; without
    /// reading the rest.
    package static func sector(of bytes: UnsafeRawBufferPointer) -> Int64? {
        guard bytes.count == 20 || (bytes.count == 21 && bytes[20] & ~1 == 0) else { return nil }
        return Int64(littleEndian: bytes.loadUnaligned(as: Int64.self))
    }

    /// ``decode(_:)`` of bytes read in place (a TASK's frame, as a worker scans it). The usual 20
    /// bytes (no flags) are three loads; through the reader, a field at a time with its checks, they
    /// cost ~230 instructions a scan. Any other length goes through the reader, which says what is
    /// wrong with it.
    package static func decode(_ bytes: UnsafeRawBufferPointer) throws(ProtocolError) -> SectorInput {
        guard bytes.count == 20 else { return try Self.read(ByteReader(bytes, what: "sector input")) }
        let nanoseconds = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        return SectorInput(
            sector: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: Int64.self)),
            work: Self.work(nanoseconds: nanoseconds),
            failEvery: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self)),
            cpuBound: false
        )
    }

    /// The work of an input's nanoseconds. No work (every no-op task) skips the 128-bit conversion
    /// (~110 instructions a scan).
    private static func work(nanoseconds: UInt64) -> Duration {
        nanoseconds == 0 ? .zero : .nanoseconds(Int64(clamping: nanoseconds))
    }

    private static func read<Bytes>(_ reader: ByteReader<Bytes>) throws(ProtocolError) -> SectorInput {
        var reader = reader
        let sector = try reader.i64()
        let nanoseconds = try reader.u64()
        let failEvery = try reader.u32()
        var cpuBound = false
        if reader.remaining > 0 {
            let flags = try reader.u8()
            guard flags & ~1 == 0 else { throw ProtocolError(.invalidValue, "sector input flags \(flags) are unknown") }
            cpuBound = flags & 1 != 0
        }
        try reader.finish()
        return SectorInput(
            sector: sector,
            work: Self.work(nanoseconds: nanoseconds),
            failEvery: failEvery,
            cpuBound: cpuBound
        )
    }
}
