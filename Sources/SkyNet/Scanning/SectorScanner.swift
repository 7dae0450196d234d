import SkyNetCore
import Synchronization

/// The book's scanner: input a sector number, output `"sector N: K signals"`.
///
/// - `work` is how long a scan takes (a cancellable sleep, so it holds a slot but no thread; or, with
///   `cpuBound`, a busy loop on a thread that checks for cancellation).
/// - `failEvery` mimics the book's `UnreliableAPI`: every Nth sector scan attempt counted by the
///   scanner's ``UnreliableAPI`` throws before doing any work. By default that is
///   ``UnreliableAPI/shared``, one count per process, so several ScanSystems in one process (the
///   demo) share it; a test passes its own. Like a flaky service, it does not fail the same sector
///   twice in a row (unless `failEvery` is 1: then every attempt fails), so a retry can hit the count
///   again only in another process; with the default 3 attempts and local retries, every task
///   completes.
///
/// The output depends only on the sector, so a test can check every result with ``expectedOutput(sector:)``.
public struct SectorScanner: TaskScanner {
    /// `sector`.
    public static let kind = "sector"

    /// The flaky service whose count decides which attempts fail.
    public let api: UnreliableAPI

    /// A sector scanner.
    /// - Parameter api: the failure count to use (default: the process's one).
    public init(api: UnreliableAPI = .shared) { self.api = api }

    /// The output a scan of `sector` produces.
    public static func expectedOutput(sector: Int64) -> String {
        String(decoding: Self.output(sector: sector), as: UTF8.self)
    }

    /// The output's bytes, `sector N: S signals` (``write(sector:into:)``), in an array.
    static func output(sector: Int64) -> [UInt8] {
        // Written on the stack and copied: `init(unsafeUninitializedCapacity:)` allocated through the
        // standard library's unspecialized path (~700 instructions more, a type metadata lookup).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.outputCapacity) { buffer in
            Array(buffer[..<Self.write(sector: sector, into: buffer)])
        }
    }

    /// The most bytes an output takes: 7 + 20 (a sign and 19 digits) + 2 + 1 + 8 = 38.
    static let outputCapacity = 40

    /// Writes the output's bytes, `sector N: S signals`, into `buffer` (``outputCapacity`` bytes at
    /// least) without a String in between, and returns how many. Appended to an array piece by piece
    /// (the text through the generic `append(contentsOf:)` of a `String.UTF8View`), they cost ~1,000
    /// instructions a scan, more than the rest of a worker's scan of a no-op task. (No nested
    /// function writes here: one that captures `at` makes every use of it a dynamic exclusivity
    /// check.)
    static func write(sector: Int64, into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let signals = (UInt64(bitPattern: sector) &* 0x9E37_79B9_7F4A_7C15) >> 61
        var at = 0
        buffer.write("sector ", at: &at)
        if sector < 0 { buffer.write("-", at: &at) }
        buffer.writeDecimal(sector.magnitude, at: &at)
        buffer.write(": ", at: &at)
        buffer.writeDecimal(signals, at: &at)
        buffer.write(" signals", at: &at)
        return at
    }

    /// A sector scan sleeps (or returns at once); only a CPU-bound one occupies its thread.
    public func neverBlocks(_ input: [UInt8]) -> Bool {
        guard let request = try? SectorInput.decode(input) else { return true }
        return !request.cpuBound
    }

    /// Counts the attempt (throwing when it is one that fails), does the work, and returns `sector N: S signals`.
    public func scan(_ input: [UInt8]) async throws -> [UInt8] {
        let request = try SectorInput.decode(input)
        try self.api.call(request)
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
        guard try self.answersAtOnce(request) else { return nil }
        return Self.output(sector: request.sector)
    }

    /// Whether `request` is scanned at once (it has no work); if so, counts the attempt, throwing when
    /// it is one that fails.
    private func answersAtOnce(_ request: SectorInput) throws -> Bool {
        guard request.work <= .zero else { return false }
        try self.api.call(request)
        return true
    }

    /// ``scanImmediately(_:)`` as a worker calls it: the input read where it arrived, the output
    /// written on the stack, so that a worker's sector task without work costs no allocation.
    public func _scanImmediately(_ input: UnsafeRawBufferPointer, _ output: (UnsafeRawBufferPointer) -> Void) throws {
        let request = try SectorInput.decode(input)
        guard try self.answersAtOnce(request) else { return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.outputCapacity) { buffer in
            output(
                UnsafeRawBufferPointer(
                    rebasing: UnsafeMutableRawBufferPointer(buffer)[..<Self.write(sector: request.sector, into: buffer)]
                )
            )
        }
    }
}

/// The book's `UnreliableAPI`: a count of sector scan attempts, every `failEvery`th of which fails.
/// Like a flaky service, it does not fail the same sector twice in a row (unless `failEvery` is 1).
/// Thread-safe: an atomic count and a `Mutex`-guarded set.
public final class UnreliableAPI: Sendable {
    /// The process's count, shared by every ``SectorScanner`` that is given no other.
    public static let shared = UnreliableAPI()

    private let attempts = Atomic<UInt64>(0)
    /// Sectors whose last attempt failed.
    private let failedLast = Mutex<Set<Int64>>([])

    /// A new count, starting at zero.
    public init() {}

    /// Attempts counted so far.
    public var calls: UInt64 { self.attempts.load(ordering: .relaxed) }

    /// Counts one attempt and throws when it is one that fails.
    /// - Throws: ``ScannerError`` ("UnreliableAPI: scan attempt N … failed").
    func call(_ request: SectorInput) throws {
        let attempt = self.attempts.add(1, ordering: .relaxed).newValue
        let due = request.failEvery > 0 && attempt % UInt64(request.failEvery) == 0
        let fails = self.failedLast.withLock { failed in
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

// The book's kind, built from and read off a ``ScanTask``.
extension ScanTask {
    /// A task for the built-in ``SectorScanner``.
    /// - Parameters:
    ///   - sector: the sector number to scan.
    ///   - work: how long the scan takes (the book's demo uses 1 s).
    ///   - failEvery: every Nth scan attempt in the process that runs it throws; 0 never fails.
    ///   - cpuBound: the work spins the CPU instead of sleeping.
    public static func sector(
        _ sector: Int,
        work: Duration = .zero,
        failEvery: Int = 0,
        cpuBound: Bool = false,
        id: TaskID = .random()
    )
        -> ScanTask
    {
        ScanTask(
            id: id,
            kind: SectorScanner.kind,
            input: SectorInput(
                sector: Int64(sector),
                work: work,
                failEvery: UInt32(clamping: failEvery),
                cpuBound: cpuBound
            ).encode()
        )
    }

    /// The sector number, when this is a sector task.
    public var sector: Int? { self.sectorNumber.map(Int.init) }

    /// The sector number of a sector task whose input ``SectorInput/decode(_:)-([UInt8])`` reads,
    /// read in place (`skynet submit` prints it for every result: decoded whole, ~370 instructions).
    package var sectorNumber: Int64? {
        guard self.kind == SectorScanner.kind else { return nil }
        return self.input.withUnsafeBytes { SectorInput.sector(of: $0) }
    }
}
