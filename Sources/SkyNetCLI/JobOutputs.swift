package import SkyNet
import Foundation
import Glibc

/// What `skynet submit` does with final results besides printing them: `-k` order, `--joblog`, and
/// `--results`.
package struct JobOutputOptions: Sendable {
    /// Print results in input order (`-k`/`--keep-order`) rather than as they complete.
    package var keepOrder: Bool
    /// A file for GNU parallel's job log.
    package var joblog: String?
    /// A directory for each task's stdout, stderr and exit status.
    package var resultsDirectory: String?

    package init(keepOrder: Bool = false, joblog: String? = nil, resultsDirectory: String? = nil) {
        self.keepOrder = keepOrder
        self.joblog = joblog
        self.resultsDirectory = resultsDirectory
    }
}

/// Releases values in index order: a value waits until every value before it has come.
package struct InOrder<Value> {
    private var waiting: [Int: Value] = [:]
    private var next = 0

    package init() {}

    /// Adds the value for `index`; returns the values now released, in order.
    package mutating func add(_ index: Int, _ value: Value) -> [Value] {
        self.waiting[index] = value
        var released: [Value] = []
        while let value = self.waiting.removeValue(forKey: self.next) {
            released.append(value)
            self.next += 1
        }
        return released
    }

    /// Everything still waiting (the job ended without some results), in order.
    package mutating func flush() -> [Value] {
        defer { self.waiting.removeAll() }
        return self.waiting.keys.sorted().compactMap { self.waiting[$0] }
    }
}

/// One final result as `exec` shows it: its command, exit status and output (from the output when
/// it completed, from the failure's detail when it did not).
package struct ExecView: Sendable {
    /// The task's number (`{#}`), 0 when it has none.
    package let sequence: Int
    /// The command line.
    package let command: String
    /// How the command ended, when it ran to an end.
    package let output: ExecOutput?

    /// The view of `result`; nil when it is not an `exec` task.
    package init?(_ result: FinalResult) {
        guard result.task.kind == ExecScanner.kind, let request = try? ExecRequest(scanBytes: result.task.input) else {
            return nil
        }
        self.sequence = request.sequence
        self.command = request.commandLine
        let bytes = result.status == .completed ? result.output : result.errorDetail
        self.output = bytes.isEmpty ? nil : try? ExecOutput(scanBytes: bytes)
    }

    /// The task's number for a job log or a results directory: its `{#}`, else its place in the
    /// job (`index` + 1).
    static func sequence(of result: FinalResult, index: Int) -> Int {
        guard let view = ExecView(result), view.sequence > 0 else { return index + 1 }
        return view.sequence
    }

    /// GNU parallel's Exitval: the exit status, or -1 when the command did not exit by itself (a
    /// signal, a timeout, a cancel, or it never ran).
    package var exitValue: Int32 {
        guard let output = self.output, output.signal == 0 else { return -1 }
        return output.exitCode
    }
}

/// GNU parallel's `--joblog`: a header, then one tab-separated row per task as it finishes: Seq,
/// Host, Starttime (epoch seconds), JobRuntime (seconds), Send, Receive (output bytes), Exitval,
/// Signal, Command.
package final class JobLog: Sendable {
    private let fd: Int32
    package let path: String

    package static let header = "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\tSignal\tCommand\n"

    /// Creates (or truncates) the log at `path` and writes its header.
    /// - Throws: ``JobOutputError`` with the reason when it cannot be created or written.
    package init(path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw JobOutputError("cannot write --joblog \(path): \(String(cString: strerror(errno)))")
        }
        self.fd = fd
        self.path = path
        if let code = POSIX.writeAll(fd, Array(Self.header.utf8)) {
            throw JobOutputError("cannot write --joblog \(path): \(String(cString: strerror(code)))")
        }
    }

    deinit { close(self.fd) }

    /// The row for `result`, the `index`th task of its job.
    package static func row(_ result: FinalResult, index: Int) -> String {
        let view = ExecView(result)
        let sequence = ExecView.sequence(of: result, index: index)
        let output = view?.output
        let started = output?.started ?? Date().timeIntervalSince1970
        let runtime = output.map { $0.runtime.seconds } ?? 0
        let received = output.map { $0.stdoutBytes + $0.stderrBytes } ?? result.output.count
        let exit: Int32 = view?.exitValue ?? (result.status == .completed ? 0 : -1)
        let signal = output?.signal ?? 0
        let command = view?.command ?? "\(result.task.kind) \(JobReporter.label(result.task))"
        let host = result.system.replacing("\t", with: " ")
        return
            "\(sequence)\t\(host)\t\(String(format: "%.3f", started))\t\(String(format: "%10.3f", runtime))\t0\t\(received)\t\(exit)\t\(signal)\t\(command.replacing("\n", with: " "))\n"
    }

    /// Appends the row for `result`.
    /// - Throws: ``JobOutputError`` with the reason (a full disk: `No space left on device`).
    package func write(_ result: FinalResult, index: Int) throws(JobOutputError) {
        if let code = POSIX.writeAll(self.fd, Array(Self.row(result, index: index).utf8)) {
            throw JobOutputError(String(cString: strerror(code)))
        }
    }
}

/// `--results DIR`: `DIR/<seq>/stdout`, `stderr` and `exit` (the exit status, `signal N`, or the
/// error when the command never ended by itself).
package struct ResultsDirectory: Sendable {
    package let path: String

    /// - Throws: ``JobOutputError`` with the reason when `path` is not a directory that can be made.
    package init(path: String) throws {
        if let reason = Self.makeDirectory(path) {
            throw JobOutputError("cannot create --results directory \(path): \(reason)")
        }
        self.path = path
    }

    /// Makes `path` and its parents; nil, or why not.
    private static func makeDirectory(_ path: String) -> String? {
        var info = stat()
        if stat(path, &info) == 0 {
            return info.st_mode & S_IFMT == S_IFDIR ? nil : "it exists and is not a directory"
        }
        let parent = String(path.reversed().drop { $0 == "/" }.drop { $0 != "/" }.reversed())
        if !parent.isEmpty, parent != "/", parent != path, let reason = Self.makeDirectory(parent) { return reason }
        guard mkdir(path, 0o755) == 0 || errno == EEXIST else { return String(cString: strerror(errno)) }
        return nil
    }

    /// Writes `result`'s three files.
    /// - Throws: ``JobOutputError`` with the file and the reason.
    package func write(_ result: FinalResult, index: Int) throws(JobOutputError) {
        let view = ExecView(result)
        let sequence = ExecView.sequence(of: result, index: index)
        let directory = POSIX.path(self.path, String(sequence))
        if let reason = Self.makeDirectory(directory) { throw JobOutputError("\(directory): \(reason)") }
        let stdout: [UInt8]
        let stderr: [UInt8]
        let exit: String
        if let output = view?.output {
            (stdout, stderr) = (output.stdout, output.stderr)
            exit = output.signal != 0 ? "signal \(output.signal)" : String(output.exitCode)
        } else if result.status == .completed {
            (stdout, stderr, exit) = (result.output, [], "0")
        } else {
            (stdout, stderr, exit) = ([], Array((result.error ?? result.status.rawValue).utf8), result.status.rawValue)
        }
        for (name, bytes) in [("stdout", stdout), ("stderr", stderr), ("exit", Array((exit + "\n").utf8))] {
            let file = POSIX.path(directory, name)
            let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw JobOutputError("\(file): \(String(cString: strerror(errno)))") }
            let failed = POSIX.writeAll(fd, bytes)
            let closed = close(fd) == 0 ? nil : errno
            if let code = failed ?? closed { throw JobOutputError("\(file): \(String(cString: strerror(code)))") }
        }
    }
}

/// A results file or directory that cannot be written.
package struct JobOutputError: Error, Sendable, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
