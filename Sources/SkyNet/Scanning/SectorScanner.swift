import Synchronization

/// The input of a sector scan: 20 bytes, little-endian (sector i64, work ns u64, failEvery u32), and
/// a 21st byte of flags when any is set (bit 0: the work spins the CPU instead of sleeping).
public struct SectorInput: Sendable, Equatable {
    public var sector: Int64
    public var work: Duration
    public var failEvery: UInt32
    /// The work is CPU-bound (a busy loop that checks for cancellation) rather than a sleep.
    public var cpuBound: Bool

    public init(sector: Int64, work: Duration, failEvery: UInt32, cpuBound: Bool = false) {
        self.sector = sector
        self.work = work
        self.failEvery = failEvery
        self.cpuBound = cpuBound
    }

    public func encode() -> [UInt8] {
        var writer = ByteWriter(capacity: 21)
        writer.i64(self.sector)
        writer.u64(UInt64(clamping: self.work.microseconds) &* 1000)
        writer.u32(self.failEvery)
        if self.cpuBound { writer.u8(1) }
        return writer.bytes
    }

    public static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> SectorInput {
        var reader = ByteReader(bytes, what: "sector input")
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
            work: .nanoseconds(Int64(clamping: nanoseconds)),
            failEvery: failEvery,
            cpuBound: cpuBound
        )
    }
}

/// The book's scanner: input a sector number, output `"sector N: K signals"`.
///
/// - `work` is how long a scan takes (a cancellable sleep, so it holds a slot but no thread; or, with
///   `cpuBound`, a busy loop on a thread that checks for cancellation).
/// - `failEvery` mimics the book's `UnreliableAPI`: every Nth sector scan attempt *in this process*
///   throws before doing any work. The count is process-wide, so in a process that runs several
///   ScanSystems (the demo) they share it. Like a flaky service, it does not fail the same sector
///   twice in a row in one process (unless `failEvery` is 1: then every attempt fails), so a retry
///   can hit the count again only in another process; with the default 3 attempts and local retries,
///   every task completes.
///
/// The output depends only on the sector, so a test can check every result with ``expectedOutput(sector:)``.
public struct SectorScanner: Scanner {
    public static let kind = "sector"
    public var kind: String { Self.kind }

    private static let attempts = Atomic<UInt64>(0)
    /// Sectors whose last attempt in this process failed.
    private static let failedLast = Mutex<Set<Int64>>([])

    public init() {}

    /// The output a scan of `sector` produces.
    public static func expectedOutput(sector: Int64) -> String {
        String(decoding: Self.output(sector: sector), as: UTF8.self)
    }

    /// The output's bytes, `sector N: S signals`, written without a String in between.
    static func output(sector: Int64) -> [UInt8] {
        let signals = (UInt64(bitPattern: sector) &* 0x9E37_79B9_7F4A_7C15) >> 61
        var bytes: [UInt8] = []
        bytes.reserveCapacity(40)
        bytes.append(contentsOf: "sector ".utf8)
        if sector < 0 { bytes.append(UInt8(ascii: "-")) }
        Self.appendDecimal(sector.magnitude, to: &bytes)
        bytes.append(contentsOf: ": ".utf8)
        Self.appendDecimal(signals, to: &bytes)
        bytes.append(contentsOf: " signals".utf8)
        return bytes
    }

    private static func appendDecimal(_ value: UInt64, to bytes: inout [UInt8]) {
        let start = bytes.count
        var value = value
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(value % 10))
            value /= 10
        } while value > 0
        bytes[start...].reverse()
    }

    /// A sector scan sleeps (or returns at once); only a CPU-bound one occupies its thread.
    public func neverBlocks(_ input: [UInt8]) -> Bool {
        guard let request = try? SectorInput.decode(input) else { return true }
        return !request.cpuBound
    }

    public func scan(_ input: [UInt8]) async throws -> [UInt8] {
        let request = try SectorInput.decode(input)
        try Self.countAttempt(request)
        if request.work > .zero {
            if request.cpuBound {
                let clock = ContinuousClock()
                let end = clock.now + request.work
                // Reading the clock keeps the CPU busy; checking for cancellation keeps it cooperative.
                while clock.now < end { try Task.checkCancellation() }
            } else {
                try await ScanContext.sleep(for: request.work)
            }
        }
        return Self.output(sector: request.sector)
    }

    /// A scan without work is done at once (and a malformed input fails at once).
    public func scanImmediately(_ input: [UInt8]) throws -> [UInt8]? {
        let request = try SectorInput.decode(input)
        guard request.work <= .zero else { return nil }
        try Self.countAttempt(request)
        return Self.output(sector: request.sector)
    }

    /// Counts one attempt in this process and throws when it is one that fails.
    private static func countAttempt(_ request: SectorInput) throws {
        let attempt = Self.attempts.add(1, ordering: .relaxed).newValue
        let due = request.failEvery > 0 && attempt % UInt64(request.failEvery) == 0
        let fails = Self.failedLast.withLock { failed in
            if due && (request.failEvery == 1 || !failed.contains(request.sector)) {
                failed.insert(request.sector)
                return true
            }
            // Removing costs a hash lookup a scan; skip it when nothing ever failed here.
            if !failed.isEmpty { failed.remove(request.sector) }
            return false
        }
        if fails {
            throw ScannerError(
                "UnreliableAPI: scan attempt \(attempt) in this process failed (fails every \(request.failEvery))"
            )
        }
    }
}
