import Foundation
import Glibc
import SkyNet

/// A `skynet` child process started by `skynet bench`, its standard error in a file (a pipe nobody
/// reads could fill and stall it).
final class BenchChild {
    let process = Process()
    let logURL: URL

    init(_ arguments: [String], name: String, directory: URL) throws {
        self.logURL = directory.appendingPathComponent("\(name).log")
        _ = FileManager.default.createFile(atPath: self.logURL.path, contents: nil)
        self.process.executableURL = BenchChild.executable
        self.process.arguments = arguments
        self.process.standardOutput = FileHandle.nullDevice
        self.process.standardError = try FileHandle(forWritingTo: self.logURL)
        self.process.standardInput = FileHandle.nullDevice
        try self.process.run()
    }

    /// This program (`/proc/self/exe`), so the children are the same build.
    static var executable: URL { URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath() }

    var pid: Int32 { self.process.processIdentifier }
    var log: String { (try? String(contentsOf: self.logURL, encoding: .utf8)) ?? "" }

    /// Resident memory in bytes, from `/proc/PID/status` (0 when it cannot be read).
    var residentBytes: Int { processResidentBytes(of: self.pid) }

    /// SIGTERM, then SIGKILL after `grace`.
    func stop(grace: Duration = .seconds(5)) {
        guard self.process.isRunning else { return }
        kill(self.pid, SIGTERM)
        let deadline = ContinuousClock.now + grace
        while self.process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if self.process.isRunning {
            kill(self.pid, SIGKILL)
            self.process.waitUntilExit()
        }
    }
}

/// Resident memory of a process in bytes (`VmRSS`), 0 when unknown.
func processResidentBytes(of pid: Int32) -> Int {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let digits = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return digits * 1024
    }
    return 0
}

/// A broker and worker processes on loopback with ephemeral ports, for one benchmark run.
final class BenchCluster {
    let directory: URL
    let broker: BenchChild
    private(set) var workers: [BenchChild] = []
    let frontend: String
    let backend: String
    /// `--idle-spin` for the broker and every worker, as the bench itself was given it.
    let polling: ReactorOptions

    init(brokerArguments: [String] = [], polling: ReactorOptions) async throws {
        self.polling = polling
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-bench-\(UUID())")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        self.broker = try BenchChild(
            ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"] + brokerArguments
                + polling.arguments,
            name: "broker",
            directory: self.directory
        )
        let deadline = ContinuousClock.now + .seconds(15)
        var endpoints: (String, String)?
        while endpoints == nil, ContinuousClock.now < deadline {
            let log = self.broker.log
            if let frontend = Self.field("frontend", in: log), let backend = Self.field("backend", in: log) {
                endpoints = (frontend, backend)
            } else if !self.broker.process.isRunning {
                break
            } else {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        guard let (frontend, backend) = endpoints else {
            self.broker.stop()
            throw BenchError("the broker did not start: \(self.broker.log.suffix(500))")
        }
        self.frontend = frontend
        self.backend = backend
    }

    /// Starts `count` workers with `slots` slots each (named bench-1, bench-2, …).
    func addWorkers(_ count: Int, slots: Int, extra: [String] = []) throws {
        for _ in 0..<count {
            let index = self.workers.count + 1
            self.workers.append(
                try BenchChild(
                    ["worker", "--broker", self.backend, "--slots", "\(slots)", "--name", "bench-\(index)"] + extra
                        + self.polling.arguments,
                    name: "worker-\(index)",
                    directory: self.directory
                )
            )
        }
    }

    func stop() {
        for worker in self.workers { kill(worker.pid, SIGTERM) }
        for worker in self.workers { worker.stop() }
        self.broker.stop()
        try? FileManager.default.removeItem(at: self.directory)
    }

    static func field(_ key: String, in log: String) -> String? {
        guard let range = log.range(of: "\(key)=") else { return nil }
        return String(log[range.upperBound...].prefix { !$0.isWhitespace })
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
