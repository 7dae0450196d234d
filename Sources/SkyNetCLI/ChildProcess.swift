package import Foundation
import SkyNet
import Glibc

/// A `skynet` child process with its standard output and error in files (a pipe nobody reads could
/// fill up and stall it): what `skynet bench` and the integration tests start brokers and workers
/// with. It is killed (SIGKILL) if it is still running when this object goes away.
package final class ChildProcess {
    package let name: String
    package let process = Process()
    package let stdoutURL: URL
    package let stderrURL: URL

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
        if let program = launcher.first {
            self.process.executableURL = URL(fileURLWithPath: program)
            self.process.arguments = Array(launcher.dropFirst()) + [executable] + arguments
        } else {
            self.process.executableURL = URL(fileURLWithPath: executable)
            self.process.arguments = arguments
        }
        self.process.standardOutput = try FileHandle(forWritingTo: self.stdoutURL)
        self.process.standardError = try FileHandle(forWritingTo: self.stderrURL)
        self.process.standardInput = FileHandle.nullDevice
        try self.process.run()
    }

    deinit {
        if self.process.isRunning {
            kill(self.process.processIdentifier, SIGKILL)
            self.process.waitUntilExit()
        }
    }

    /// This program (`/proc/self/exe`), so children of `skynet bench` are the same build.
    package static var currentExecutable: String {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    }

    package var pid: Int32 { self.process.processIdentifier }
    package var isRunning: Bool { self.process.isRunning }
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
        while self.process.isRunning {
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return self.process.terminationStatus
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
            if !self.process.isRunning { return predicate(self[keyPath: output]) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    /// - Returns: its exit status, nil if it could not be stopped.
    @discardableResult
    package func stop(grace: Duration = .seconds(5)) async -> Int32? {
        guard self.isRunning else { return self.process.terminationStatus }
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
