import SkyNetCore
public import ZeroMQ

/// The code for one kind of task: typed input in, typed output out.
///
/// ```swift
/// struct CountPrimes: TaskScanner {
///     static let kind = "count-primes"      // stable on the wire, whatever the type is called
///     func scan(_ limit: Int) async throws -> Int { … }
/// }
/// ```
///
/// `Input` and `Output` are any `Codable` types; they travel as ``ScanCoding`` describes (`[UInt8]`
/// unchanged, strings and numbers compactly, anything else as JSON). A scanner of `[UInt8]` to
/// `[UInt8]` is the raw, wire-level form.
///
/// Scanners run on Swift's global concurrent executor, unless they say a scan never blocks (below).
/// A scanner that blocks a thread (file or process I/O) must run that work on its own threads.
/// Cancellation is cooperative: a long scan should check `Task.isCancelled` or use cancellable awaits
/// (`Task.sleep`).
public protocol TaskScanner: Sendable {
    /// What a task gives the scanner.
    associatedtype Input: Codable & Sendable
    /// What a completed scan returns.
    associatedtype Output: Codable & Sendable

    /// The kind name tasks use to pick this scanner, e.g. `"sector"` (1 to 64 UTF-8 bytes). It is
    /// what the wire carries: keep it when renaming the type, or queued tasks find no scanner.
    static var kind: String { get }
    /// Scans one input.
    /// - Returns: the output.
    /// - Throws: any error; the attempt is reported as failed with the error's description (a
    ///   ``ScannerError`` may add detail bytes, which reach the submitter).
    func scan(_ input: Input) async throws -> Output
    /// Whether scanning `input` never occupies a thread for long: it returns at once or only awaits
    /// (sleeps, other actors, I/O that suspends). A worker then runs it on its reactor thread, which
    /// saves two thread hand-offs a task; anything that computes for more than a few microseconds or
    /// blocks must answer false (the default), or it would delay heartbeats and every other message.
    /// Asked only of scanners whose `Input` has a compact form (``ScanCoding``: bytes, strings,
    /// numbers, ``CustomScanCoding``), like ``scanImmediately(_:)``: a JSON input is not decoded
    /// on the reactor for the question.
    func neverBlocks(_ input: Input) -> Bool
    /// Scans `input` at once, when that needs no waiting and no more than a few microseconds: the
    /// output, or nil to say the scan has to wait (then ``scan(_:)`` runs it; nothing of this call
    /// may count as an attempt). A worker calls it on its reactor thread for every TASK, so an answer
    /// here costs no task and no thread hand-off. The default is nil.
    /// - Throws: any error; the attempt is reported as failed, as from ``scan(_:)``.
    func scanImmediately(_ input: Input) throws -> Output?
    /// Not for use or for implementing outside SkyNet: how a worker asks ``scanImmediately(_:)``
    /// with a task's bytes as they arrived (decoded and encoded as ``ScanCoding`` describes). It
    /// calls `output` once with the output's bytes (read during the call), or not at all when the
    /// scan has to wait (nothing of the call then counts as an attempt). The default below serves every
    /// scanner (its input copied into an array for ``scanImmediately(_:)``); the built-in
    /// ``SectorScanner`` reads its input in place and writes its output on the stack, so a worker's
    /// sector task costs no allocation. A requirement, not just an extension method, so that it is
    /// compiled for each scanner's own `Input` and `Output`: called through `any TaskScanner`, a
    /// generic extension method looked up `Optional<Output>`'s type metadata at run time, and
    /// destroyed it through value witnesses, ~800 instructions for every task.
    func _scanImmediately(_ input: UnsafeRawBufferPointer, _ output: (UnsafeRawBufferPointer) -> Void) throws
}

extension TaskScanner {
    /// By default every scan may block: it runs on the global pool.
    public func neverBlocks(_ input: Input) -> Bool { false }
    /// By default nothing is answered at once.
    public func scanImmediately(_ input: Input) throws -> Output? { nil }
    /// ``kind``, for a scanner value (also an `any TaskScanner`).
    public var kind: String { Self.kind }

    /// A task of this kind for `input`, encoded as ``ScanCoding`` describes.
    /// - Throws: ``ScanCodingError`` when the input cannot be encoded.
    public func task(
        _ input: Input,
        id: TaskID = .random(),
        priority: Int32 = 0,
        timeout: Duration? = nil
    ) throws(ScanCodingError) -> ScanTask {
        ScanTask(id: id, kind: Self.kind, input: try ScanCoding.encode(input), priority: priority, timeout: timeout)
    }

    // The wire-level forms a ScanSystem calls: bytes in, bytes out.

    nonisolated(nonsending) func scanBytes(_ bytes: [UInt8]) async throws -> [UInt8] {
        let input = try ScanCoding.decode(Input.self, from: bytes, kind: Self.kind)
        return try ScanCoding.encode(try await self.scan(input))
    }

    // The two questions a worker asks on its reactor thread for every TASK decode the input only
    // when that is cheap (a compact form): a JSON input is decoded once, by the scan itself.

    func neverBlocksBytes(_ bytes: [UInt8]) -> Bool {
        guard ScanCoding.isCompact(Input.self) else { return false }
        guard let input = try? ScanCoding.decode(Input.self, from: bytes, kind: Self.kind) else { return true }
        return self.neverBlocks(input)
    }

    /// See the requirement. Inlinable, so that a scanner in another module gets it compiled for its
    /// types too.
    @inlinable
    public func _scanImmediately(
        _ input: UnsafeRawBufferPointer,
        _ output: (UnsafeRawBufferPointer) -> Void
    ) throws {
        guard ScanCoding.isCompact(Input.self) else { return }
        let input = try ScanCoding.decode(Input.self, from: Array(input), kind: Self.kind)
        guard let result = try self.scanImmediately(input) else { return }
        try ScanCoding.encode(result).withUnsafeBytes(output)
    }
}

/// An error a scanner throws, with a message for the user and, optionally, detail bytes that travel
/// to the submitter with the failure (``FinalResult/errorDetail``; the first 30 KiB).
public struct ScannerError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    /// Machine-readable detail (e.g. an `exec` command's exit status and output), or empty.
    public let detail: [UInt8]
    /// An error with a message, and detail bytes if any.
    public init(_ message: String, detail: [UInt8] = []) {
        self.message = message
        self.detail = detail
    }
    /// The message.
    public var description: String { self.message }
}

/// What a running scan can use from the process that runs it.
public enum ScanContext {
    /// The reactor of the worker running this scan, when the scan runs on it (its scanner
    /// ``TaskScanner/neverBlocks(_:)``); nil elsewhere (a coordinator's local ScanSystem, tests).
    @TaskLocal public static var reactor: Reactor?

    /// The task being scanned (its id and attempt), in a ScanSystem; nil elsewhere.
    @TaskLocal public static var task: ScanTask.Reference?

    /// Sleeps for `duration`, cancellably: on the worker's reactor timers when the scan runs there
    /// (one thread wake-up when it ends instead of three: worth it for a hundred workers on a few
    /// cores), else `Task.sleep`.
    public nonisolated(nonsending) static func sleep(for duration: Duration) async throws {
        if let reactor = Self.reactor {
            try await reactor.sleep(for: duration)
        } else {
            try await Task.sleep(for: duration)
        }
    }
}
