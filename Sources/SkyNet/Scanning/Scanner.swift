/// The code for one kind of task.
///
/// Scanners run on Swift's global concurrent executor, unless they say a scan never blocks (below).
/// A scanner that blocks a thread (file or process I/O) must run that work on its own threads.
/// Cancellation is cooperative: a long scan should check `Task.isCancelled` or use cancellable awaits
/// (`Task.sleep`).
public protocol Scanner: Sendable {
    /// The kind name tasks use to pick this scanner, e.g. `"sector"` (at most 64 UTF-8 bytes).
    var kind: String { get }
    /// Scans one input.
    /// - Returns: the output bytes.
    /// - Throws: any error; the attempt is reported as failed with the error's description.
    func scan(_ input: [UInt8]) async throws -> [UInt8]
    /// Whether scanning `input` never occupies a thread for long: it returns at once or only awaits
    /// (sleeps, other actors, I/O that suspends). A worker then runs it on its reactor thread, which
    /// saves two thread hand-offs a task; anything that computes for more than a few microseconds or
    /// blocks must answer false (the default), or it would delay heartbeats and every other message.
    func neverBlocks(_ input: [UInt8]) -> Bool
}

extension Scanner {
    public func neverBlocks(_ input: [UInt8]) -> Bool { false }
}

/// An error a scanner throws, with a message for the user.
public struct ScannerError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { self.message }
}
