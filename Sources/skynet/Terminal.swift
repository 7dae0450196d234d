import ArgumentParser
import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import Synchronization
import ZeroMQ

/// One-line errors for the user (ArgumentParser prints `Error: <description>` and exits 1).
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Checks a client's `--broker`: one endpoint, or the members of an HA group separated by commas.
func checkBrokers(_ list: String, flag: String) throws {
    for endpoint in BrokerList(list).endpoints { try checkEndpoint(endpoint, binding: false, flag: flag) }
}

/// A client's `--broker` default: `SKYNET_BROKER` when set (a worker's names backends, a
/// coordinator's frontends), else `fallback`.
func defaultBroker(_ fallback: String) -> String {
    guard let value = ProcessInfo.processInfo.environment["SKYNET_BROKER"], !value.isEmpty else { return fallback }
    return value
}

func checkEndpoint(_ endpoint: String, binding: Bool, flag: String) throws {
    if let problem = Endpoint.problem(with: endpoint, binding: binding) {
        throw ValidationError("\(flag): \(problem)")
    }
}

/// Standard output and, on a terminal, a progress line on standard error.
enum Terminal {
    /// Writes `text` to standard output. A write that fails (a full disk, a closed pipe) is the
    /// command's error: what it printed is not lost in silence.
    static func write(_ text: String) throws(CLIError) {
        try self.write(bytes: Array(text.utf8))
    }

    /// ``write(_:)`` for bytes.
    static func write(bytes: [UInt8]) throws(CLIError) {
        if let code = POSIX.writeAll(STDOUT_FILENO, bytes) {
            throw CLIError("standard output: \(String(cString: strerror(code)))")
        }
    }

    /// Writes all of `text` to a file descriptor (no stdio buffers, so lines from any thread stay whole).
    static func writeAll(_ fd: Int32, _ text: String) {
        _ = POSIX.writeAll(fd, Array(text.utf8))
    }

    static var stderrIsTTY: Bool { isatty(STDERR_FILENO) != 0 }

    static func progress(_ line: String?) {
        // Clear the line, then draw the new one without a newline (nil only clears).
        self.writeAll(STDERR_FILENO, "\r\u{1B}[K" + (line ?? ""))
    }

    static func output(progress: Bool) -> JobRunner.Output {
        let progressSink: (@Sendable (String?) -> Void)?
        if progress && Terminal.stderrIsTTY {
            progressSink = { line in Terminal.progress(line) }
        } else {
            progressSink = nil
        }
        return JobRunner.Output(
            writeBytes: { bytes in POSIX.writeAll(STDOUT_FILENO, bytes) },
            writeError: { bytes in _ = POSIX.writeAll(STDERR_FILENO, bytes) },
            progress: progressSink
        )
    }
}

/// Ctrl-C and SIGTERM for a command that runs a job: the first one is delivered on ``stream`` (so
/// the job is cancelled and its partial summary printed), a second one quits at once (exit 130).
final class Interrupts {
    /// What the signal handlers share (on a Dispatch queue).
    private final class State: Sendable {
        let continuation: AsyncStream<String>.Continuation
        let count = Mutex(0)
        /// Whether the first signal says "cancelling the job" (the receiver of ``stream`` may say
        /// something else).
        let announce: Bool

        init(_ continuation: AsyncStream<String>.Continuation, announce: Bool) {
            self.continuation = continuation
            self.announce = announce
        }

        func deliver(_ reason: String) {
            let count = self.count.withLock { count in
                count += 1
                return count
            }
            if count > 1 {
                Terminal.writeAll(STDERR_FILENO, "\nQuitting at once.\n")
                exit(130)
            }
            if self.announce {
                let title = reason.prefix(1).uppercased() + reason.dropFirst()
                Terminal.writeAll(STDERR_FILENO, "\n\(title): cancelling the job (again to quit at once)\n")
            }
            self.continuation.yield(reason)
        }
    }

    let stream: AsyncStream<String>
    private let state: State
    /// The signal sources, alive as long as this object.
    private let sources: [any DispatchSourceSignal]

    init(announce: Bool = true) {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        let state = State(continuation, announce: announce)
        var sources: [any DispatchSourceSignal] = []
        for (number, reason) in [(SIGINT, "interrupted"), (SIGTERM, "terminated")] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { state.deliver(reason) }
            source.resume()
            sources.append(source)
        }
        self.stream = stream
        self.state = state
        self.sources = sources
    }

    deinit {
        for source in self.sources { source.cancel() }
    }

    /// Whether a signal arrived.
    var received: Bool { self.state.count.withLock { $0 > 0 } }

    /// ``received``, as a function any task may call.
    var check: @Sendable () -> Bool {
        let state = self.state
        return { state.count.withLock { $0 > 0 } }
    }
}
