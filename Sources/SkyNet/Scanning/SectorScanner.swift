import Synchronization

/// The input of a sector scan: 20 bytes, little-endian (sector i64, work ns u64, failEvery u32).
public struct SectorInput: Sendable, Equatable {
    public var sector: Int64
    public var work: Duration
    public var failEvery: UInt32

    public init(sector: Int64, work: Duration, failEvery: UInt32) {
        self.sector = sector
        self.work = work
        self.failEvery = failEvery
    }

    public func encode() -> [UInt8] {
        var writer = ByteWriter(capacity: 20)
        writer.i64(self.sector)
        writer.u64(UInt64(clamping: self.work.microseconds) &* 1000)
        writer.u32(self.failEvery)
        return writer.bytes
    }

    public static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> SectorInput {
        var reader = ByteReader(bytes, what: "sector input")
        let sector = try reader.i64()
        let nanoseconds = try reader.u64()
        let failEvery = try reader.u32()
        try reader.finish()
        return SectorInput(sector: sector, work: .nanoseconds(Int64(clamping: nanoseconds)), failEvery: failEvery)
    }
}

/// The book's scanner: input a sector number, output `"sector N: K signals"`.
///
/// - `work` is how long a scan takes (a cancellable sleep, so it holds a slot but no thread).
/// - `failEvery` mimics the book's `UnreliableAPI`: every Nth sector scan attempt *in this process*
///   throws before doing any work. The count is process-wide, so in a process that runs several
///   ScanSystems (the demo) they share it.
///
/// The output depends only on the sector, so a test can check every result with ``expectedOutput(sector:)``.
public struct SectorScanner: Scanner {
    public static let kind = "sector"
    public var kind: String { Self.kind }

    private static let attempts = Atomic<UInt64>(0)

    public init() {}

    /// The output a scan of `sector` produces.
    public static func expectedOutput(sector: Int64) -> String {
        let signals = (UInt64(bitPattern: sector) &* 0x9E37_79B9_7F4A_7C15) >> 61
        return "sector \(sector): \(signals) signals"
    }

    public func scan(_ input: [UInt8]) async throws -> [UInt8] {
        let request = try SectorInput.decode(input)
        let attempt = Self.attempts.add(1, ordering: .relaxed).newValue
        if request.failEvery > 0 && attempt % UInt64(request.failEvery) == 0 {
            throw ScannerError(
                "UnreliableAPI: scan attempt \(attempt) in this process failed (fails every \(request.failEvery))"
            )
        }
        if request.work > .zero {
            try await Task.sleep(for: request.work)
        }
        return Array(Self.expectedOutput(sector: request.sector).utf8)
    }
}
