/// The code for one kind of task.
///
/// Scanners run on Swift's global concurrent executor, never on a reactor thread. A scanner that
/// blocks a thread (file or process I/O) must say so and run on its own threads. Cancellation is
/// cooperative: a long scan should check `Task.isCancelled` or use cancellable awaits (`Task.sleep`).
public protocol Scanner: Sendable {
    /// The kind name tasks use to pick this scanner, e.g. `"sector"` (at most 64 UTF-8 bytes).
    var kind: String { get }
    /// Scans one input.
    /// - Returns: the output bytes.
    /// - Throws: any error; the attempt is reported as failed with the error's description.
    func scan(_ input: [UInt8]) async throws -> [UInt8]
}

/// An error a scanner throws, with a message for the user.
public struct ScannerError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { self.message }
}
