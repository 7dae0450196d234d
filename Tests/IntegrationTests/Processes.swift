import Foundation
import SkyNet
import Testing

/// The `skynet` binary under test: `$SKYNET_BIN`, else this package's debug build.
enum SkynetBinary {
    static var path: String {
        if let path = ProcessInfo.processInfo.environment["SKYNET_BIN"], !path.isEmpty { return path }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/skynet").path
    }

    static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }
}

/// A `skynet` child process with its output in files (no pipe can fill up and stall it).
final class Spawned {
    let name: String
    let process = Process()
    let stdoutURL: URL
    let stderrURL: URL

    /// - Parameter launcher: a command that runs `skynet` (e.g. `ip netns exec NS`); it must exec it,
    ///   so that the process's PID is skynet's.
    init(_ arguments: [String], name: String, launcher: [String] = []) throws {
        self.name = name
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-tests-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let unique = "\(name)-\(UUID().uuidString.prefix(8))"
        self.stdoutURL = directory.appendingPathComponent("\(unique).out")
        self.stderrURL = directory.appendingPathComponent("\(unique).err")
        _ = FileManager.default.createFile(atPath: self.stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: self.stderrURL.path, contents: nil)
        guard FileManager.default.isExecutableFile(atPath: SkynetBinary.path) else {
            throw TestFailure("no skynet binary at \(SkynetBinary.path): run `swift build` first (make test does)")
        }
        if let program = launcher.first {
            self.process.executableURL = URL(fileURLWithPath: program)
            self.process.arguments = Array(launcher.dropFirst()) + [SkynetBinary.path] + arguments
        } else {
            self.process.executableURL = URL(fileURLWithPath: SkynetBinary.path)
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

    var pid: Int32 { self.process.processIdentifier }
    var isRunning: Bool { self.process.isRunning }
    var stdout: String { (try? String(contentsOf: self.stdoutURL, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOf: self.stderrURL, encoding: .utf8)) ?? "" }

    func signal(_ signal: Int32) { kill(self.pid, signal) }

    /// Waits for the process to exit; nil when it is still running at the deadline.
    func waitForExit(timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while self.process.isRunning {
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return self.process.terminationStatus
    }

    /// Waits until `predicate` holds for the standard error text.
    func waitForStderr(timeout: Duration, _ predicate: (String) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if predicate(self.stderr) { return true }
            if !self.process.isRunning { return predicate(self.stderr) }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    func stop(grace: Duration = .seconds(5)) async -> Int32? {
        guard self.isRunning else { return self.process.terminationStatus }
        self.signal(SIGTERM)
        if let status = await self.waitForExit(timeout: grace) { return status }
        self.signal(SIGKILL)
        return await self.waitForExit(timeout: .seconds(5))
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A broker and workers as real processes on loopback, with ephemeral ports.
final class Cluster {
    private(set) var broker: Spawned
    /// Every broker process this cluster ran, the current one last.
    private(set) var brokers: [Spawned] = []
    var workers: [Spawned] = []
    let frontend: String
    let backend: String
    let brokerExtra: [String]

    /// - Parameter brokerExtra: more `skynet broker` arguments (e.g. `--journal PATH`).
    init(workers count: Int, slots: Int = 4, brokerExtra: [String] = []) async throws {
        self.brokerExtra = brokerExtra
        self.broker = try await Self.startBroker(
            frontend: "tcp://127.0.0.1:*",
            backend: "tcp://127.0.0.1:*",
            extra: brokerExtra
        )
        self.brokers = [self.broker]
        let log = self.broker.stderr
        guard let frontend = Self.field("frontend", in: log), let backend = Self.field("backend", in: log) else {
            throw TestFailure("no endpoints in the broker's log: \(log)")
        }
        self.frontend = frontend
        self.backend = backend
        for index in 0..<count {
            try await self.addWorker(name: "worker-\(Character(UnicodeScalar(UInt8(97 + index))))", slots: slots)
        }
    }

    private static func startBroker(frontend: String, backend: String, extra: [String]) async throws -> Spawned {
        let broker = try Spawned(["broker", "--frontend", frontend, "--backend", backend] + extra, name: "broker")
        guard await broker.waitForStderr(timeout: .seconds(10), { $0.contains("broker listening") }) else {
            throw TestFailure("broker did not start: \(broker.stderr)")
        }
        return broker
    }

    /// SIGKILLs the broker and starts a new one on the same endpoints (and arguments).
    func killAndRestartBroker() async throws {
        self.broker.signal(SIGKILL)
        _ = await self.broker.waitForExit(timeout: .seconds(5))
        self.broker = try await Self.startBroker(
            frontend: self.frontend,
            backend: self.backend,
            extra: self.brokerExtra
        )
        self.brokers.append(self.broker)
    }

    /// Starts a worker and waits until the broker has registered it.
    @discardableResult
    func addWorker(name: String, slots: Int = 4, extra: [String] = []) async throws -> Spawned {
        let before = self.registrations
        let worker = try Spawned(
            ["worker", "--broker", self.backend, "--name", name, "--slots", "\(slots)"] + extra,
            name: name
        )
        self.workers.append(worker)
        guard
            await self.broker.waitForStderr(timeout: .seconds(10), { Self.count("worker registered", in: $0) > before })
        else {
            throw TestFailure("worker \(name) did not register: \(worker.stderr)")
        }
        return worker
    }

    var registrations: Int { Self.count("worker registered", in: self.broker.stderr) }

    func submit(_ arguments: [String], name: String = "submit") throws -> Spawned {
        try Spawned(["submit", "--broker", self.frontend] + arguments, name: name)
    }

    /// The broker's STATUS snapshot, via `skynet status --json`.
    func status() async throws -> BrokerStatus {
        let process = try Spawned(["status", "--broker", self.frontend, "--json"], name: "status")
        guard await process.waitForExit(timeout: .seconds(10)) == 0 else {
            throw TestFailure("status failed: \(process.stderr)")
        }
        return try BrokerStatus.parse(process.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Polls the broker's status until `predicate` holds.
    func waitForStatus(timeout: Duration, _ predicate: (BrokerStatus) -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if predicate(try await self.status()) { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    func shutdown() async {
        for worker in self.workers { _ = await worker.stop() }
        _ = await self.broker.stop()
    }

    static func field(_ key: String, in log: String) -> String? {
        guard let range = log.range(of: "\(key)=") else { return nil }
        return String(log[range.upperBound...].prefix { !$0.isWhitespace })
    }

    static func count(_ needle: String, in text: String) -> Int {
        text.components(separatedBy: needle).count - 1
    }
}

/// One final result line of `skynet submit --json`.
struct ResultLine: Decodable {
    let id: String
    let sector: Int?
    let status: String
    let attempts: Int
    let system: String
    let result: String?
    let error: String?
}

struct SummaryLine: Decodable {
    struct Summary: Decodable {
        let tasks: Int
        let completed: Int
        let failed: Int
        let retried: Int
        let retried_locally: Int
        let requeued: Int
        let duplicates: Int
        let wall_s: Double
        let tasks_per_s: Double
        let cancelled: Int
        let dead_letter: [DeadLetter]
    }

    struct DeadLetter: Decodable {
        let id: String
        let sector: Int?
        let attempts: Int
        let system: String
        let error: String
    }

    let summary: Summary
}

/// Parses `--json` output into result lines and the summary.
func parseJSONOutput(_ text: String) throws -> (results: [ResultLine], summary: SummaryLine.Summary) {
    var results: [ResultLine] = []
    var summary: SummaryLine.Summary?
    for line in text.split(separator: "\n") where !line.isEmpty {
        let data = Data(line.utf8)
        if line.hasPrefix("{\"summary\"") {
            summary = try JSONDecoder().decode(SummaryLine.self, from: data).summary
        } else {
            results.append(try JSONDecoder().decode(ResultLine.self, from: data))
        }
    }
    guard let summary else { throw TestFailure("no summary line in: \(text.suffix(500))") }
    return (results, summary)
}
