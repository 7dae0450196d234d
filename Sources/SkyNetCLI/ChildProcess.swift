package import Foundation
import SkyNet
import Glibc
import Synchronization

/// A `skynet` child process with its standard output and error in files (a pipe nobody reads could
/// fill up and stall it): what `skynet bench` and the integration tests start brokers and workers
/// with. It is killed (SIGKILL) if it is still running when this object goes away.
///
/// Started with `posix_spawn`, not Foundation's `Process`: on Linux, `Process.run()` reads
/// `/proc/self/fd` with a 256-byte copy of each entry, which can read past glibc's buffer and crash
/// the parent (swiftlang/swift-corelibs-foundation#5472, in Swift 6.3.1; a CI run of this project
/// crashed in it). The child gets standard input from `/dev/null`, its output in the two files, and
/// no other descriptor of this process (those listed in `/proc/self/fd` are closed in it; what is
/// opened meanwhile is close-on-exec in Swift and libzmq).
package final class ChildProcess: Sendable {
    package let name: String
    package let stdoutURL: URL
    package let stderrURL: URL
    /// The process id.
    package let pid: Int32
    /// Its exit status once reaped (as Foundation's `terminationStatus`: the exit code, or the
    /// signal that ended it).
    private let exitStatus = Mutex<Int32?>(nil)

    /// Starts `executable` with `arguments`.
    /// - Parameters:
    ///   - directory: where the output files go (created if missing).
    ///   - launcher: a command that runs the executable (e.g. `ip netns exec NS`); it must exec it,
    ///     so that the process's PID is the executable's.
    package init(
        executable: String,
        _ arguments: [String],
        name: String,
        directory: URL,
        launcher: [String] = []
    ) throws {
        self.name = name
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let unique = "\(name)-\(UUID().uuidString.prefix(8))"
        self.stdoutURL = directory.appendingPathComponent("\(unique).out")
        self.stderrURL = directory.appendingPathComponent("\(unique).err")
        _ = FileManager.default.createFile(atPath: self.stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: self.stderrURL.path, contents: nil)
        let argv = launcher.isEmpty ? [executable] + arguments : launcher + [executable] + arguments
        self.pid = try Self.spawn(argv, stdout: self.stdoutURL.path, stderr: self.stderrURL.path)
    }

    private static func spawn(_ argv: [String], stdout: String, stderr: String) throws -> pid_t {
        // Every other descriptor open here stays here (a closed one is skipped by glibc: EBADF on a
        // close action is not an error).
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let others = open.compactMap { Int32($0) }.filter { $0 > 2 }.map { POSIX.SpawnAction.close(fd: $0) }
        let started = POSIX.spawn(
            argv[0],
            argv: argv,
            searchPath: true,
            actions: [
                .open(fd: 0, path: "/dev/null", flags: O_RDONLY),
                .open(fd: 1, path: stdout, flags: O_WRONLY | O_APPEND),
                .open(fd: 2, path: stderr, flags: O_WRONLY | O_APPEND),
            ] + others
        )
        switch started {
        case .success(let pid): return pid
        case .failure(let error):
            throw SpawnError(description: "cannot start \(argv[0]): \(String(cString: strerror(error.code)))")
        }
    }

    /// A child that could not be started, and why.
    package struct SpawnError: Error, CustomStringConvertible {
        package let description: String
    }

    deinit {
        if self.isRunning {
            kill(self.pid, SIGKILL)
            var raw: Int32 = 0
            _ = waitpid(self.pid, &raw, 0)
        }
    }

    /// This program (`/proc/self/exe`), so children of `skynet bench` are the same build.
    package static var currentExecutable: String {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    }

    package var isRunning: Bool { self.terminationStatus == nil }

    /// The exit status (the exit code, or the signal that ended it), nil while it runs. Reaps it.
    package var terminationStatus: Int32? {
        self.exitStatus.withLock { status in
            if status != nil { return status }
            var raw: Int32 = 0
            let reaped = waitpid(self.pid, &raw, WNOHANG)
            if reaped == self.pid {
                let signal = raw & 0x7f
                status = signal == 0 ? (raw >> 8) & 0xff : signal
            } else if reaped < 0 && errno == ECHILD {
                status = -1  // reaped elsewhere: gone, status unknown
            }
            return status
        }
    }
    package var stdout: String { (try? String(contentsOf: self.stdoutURL, encoding: .utf8)) ?? "" }
    package var stderr: String { (try? String(contentsOf: self.stderrURL, encoding: .utf8)) ?? "" }

    /// Resident memory in bytes (`VmRSS` in `/proc/PID/status`; 0 when it cannot be read).
    package var residentBytes: Int { Self.residentBytes(of: self.pid) }

    /// Resident memory of any process in bytes, 0 when unknown.
    package static func residentBytes(of pid: Int32) -> Int {
        WorkerFigures.residentBytes(of: "\(pid)")
    }

    package func signal(_ signal: Int32) { kill(self.pid, signal) }

    /// Waits for the process to exit; nil when it is still running at the deadline.
    package func waitForExit(timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = self.terminationStatus { return status }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Waits until `predicate` holds for the standard output text (the process's machine-readable
    /// lines); false at the deadline, or when the process exited without it.
    package func waitForStdout(timeout: Duration, _ predicate: (String) -> Bool) async -> Bool {
        await self.wait(for: \.stdout, timeout: timeout, predicate)
    }

    /// Waits until `predicate` holds for the error output so far (false after `timeout`, or when the
    /// process ended without it).
    package func waitForStderr(timeout: Duration, _ predicate: (String) -> Bool) async -> Bool {
        await self.wait(for: \.stderr, timeout: timeout, predicate)
    }

    private func wait(
        for output: KeyPath<ChildProcess, String>,
        timeout: Duration,
        _ predicate: (String) -> Bool
    ) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if predicate(self[keyPath: output]) { return true }
            if !self.isRunning { return predicate(self[keyPath: output]) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    /// - Returns: its exit status, nil if it could not be stopped.
    @discardableResult
    package func stop(grace: Duration = .seconds(5)) async -> Int32? {
        if let status = self.terminationStatus { return status }
        self.signal(SIGTERM)
        if let status = await self.waitForExit(timeout: grace) { return status }
        self.signal(SIGKILL)
        return await self.waitForExit(timeout: .seconds(5))
    }

    /// The broker's `{"listening":…}` line: its endpoints, once it listens.
    package func listeningEndpoints(timeout: Duration) async -> (frontend: String, backend: String)? {
        var found: (String, String)?
        _ = await self.waitForStdout(timeout: timeout) { text in
            found = Self.listening(in: text)
            return found != nil
        }
        return found
    }

    /// The endpoints of the last `{"listening":…}` line in `text`.
    package static func listening(in text: String) -> (frontend: String, backend: String)? {
        ListeningLine.last(in: text).map { ($0.listening.frontend, $0.listening.backend) }
    }
}
