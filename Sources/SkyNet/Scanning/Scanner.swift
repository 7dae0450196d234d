public import ZeroMQ

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
    /// Scans `input` at once, when that needs no waiting and no more than a few microseconds: the
    /// output, or nil to say the scan has to wait (then ``scan(_:)`` runs it; nothing of this call
    /// may count as an attempt). A worker calls it on its reactor thread for every TASK, so an answer
    /// here costs no task and no thread hand-off. The default is nil.
    /// - Throws: any error; the attempt is reported as failed, as from ``scan(_:)``.
    func scanImmediately(_ input: [UInt8]) throws -> [UInt8]?
}

extension Scanner {
    /// By default every scan may block: it runs on the global pool.
    public func neverBlocks(_ input: [UInt8]) -> Bool { false }
    /// By default nothing is answered at once.
    public func scanImmediately(_ input: [UInt8]) throws -> [UInt8]? { nil }
}

/// An error a scanner throws, with a message for the user.
public struct ScannerError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    /// An error with a message.
    public init(_ message: String) { self.message = message }
    /// The message.
    public var description: String { self.message }
}

/// What a running scan can use from the process that runs it.
public enum ScanContext {
    /// The reactor of the worker running this scan, when the scan runs on it (its scanner
    /// ``Scanner/neverBlocks(_:)``); nil elsewhere (a coordinator's local ScanSystem, tests).
    @TaskLocal public static var reactor: Reactor?

    /// Sleeps for `duration`, cancellably: on the worker's reactor timers when the scan runs there
    /// (one thread wake-up when it ends instead of three: worth it for a hundred workers on a few
    /// cores), else `Task.sleep`.
    public static func sleep(for duration: Duration) async throws {
        if let reactor = Self.reactor {
            try await reactor.sleep(for: duration)
        } else {
            try await Task.sleep(for: duration)
        }
    }
}
