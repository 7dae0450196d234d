import Foundation
import SkyNet
import SkyNetCLI
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

/// A `skynet` child process of the binary under test (``ChildProcess``, as `skynet bench` uses).
typealias Spawned = ChildProcess

extension ChildProcess {
    /// Starts the `skynet` under test with `arguments`, its output in files under the tests' directory.
    /// - Parameter launcher: a command that runs `skynet` (e.g. `ip netns exec NS`); it must exec it.
    convenience init(_ arguments: [String], name: String, launcher: [String] = []) throws {
        guard FileManager.default.isExecutableFile(atPath: SkynetBinary.path) else {
            throw TestFailure("no skynet binary at \(SkynetBinary.path): run `swift build` first (make test does)")
        }
        try self.init(
            executable: SkynetBinary.path,
            arguments,
            name: name,
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("skynet-tests-\(getpid())"),
            launcher: launcher
        )
    }
}

/// Runs a command (`ip`, `mount`) with a 10 s bound and returns its standard output; throws with its
/// error output when it fails.
@discardableResult
func runCommand(_ path: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let output = Pipe()
    let errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let deadline = Date().addingTimeInterval(10)
    while process.isRunning, Date() < deadline { usleep(5_000) }
    let command = ([path] + arguments).joined(separator: " ")
    if process.isRunning {
        process.terminate()
        throw TestFailure("\(command) did not finish within 10 s")
    }
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    guard process.terminationStatus == 0 else {
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        throw TestFailure("\(command): \(message.trimmingCharacters(in: .whitespacesAndNewlines))")
    }
    return text
}

/// CURVE keys made with `skynet keygen` in a fresh directory: `broker`, `worker` and `coordinator`,
/// with `allow/workers` and `allow/coordinators` holding the worker's and the coordinator's public
/// certificates. ``add(_:allow:)`` makes more.
final class TestKeys {
    let directory: URL

    init() async throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-keys-\(UUID())")
        for sub in ["allow/workers", "allow/coordinators"] {
            try FileManager.default.createDirectory(
                at: self.directory.appendingPathComponent(sub),
                withIntermediateDirectories: true
            )
        }
        try await self.add("broker", allow: nil)
        try await self.add("worker", allow: "workers")
        try await self.add("coordinator", allow: "coordinators")
    }

    deinit { try? FileManager.default.removeItem(at: self.directory) }

    /// Makes `NAME.key`/`NAME.key_secret` and, with `allow`, copies the public one into that allowlist.
    func add(_ name: String, allow: String?) async throws {
        let keygen = try Spawned(["keygen", name, "--dir", self.directory.path], name: "keygen")
        guard await keygen.waitForExit(timeout: .seconds(10)) == 0 else {
            throw TestFailure("keygen \(name) failed: \(keygen.stderr)")
        }
        if let allow { try self.allow(name, in: allow) }
    }

    func allow(_ name: String, in list: String) throws {
        try FileManager.default.copyItem(
            at: self.publicFile(name),
            to: self.allowlist(list).appendingPathComponent("\(name).key")
        )
    }

    func publicFile(_ name: String) -> URL { self.directory.appendingPathComponent("\(name).key") }
    func secretFile(_ name: String) -> URL { self.directory.appendingPathComponent("\(name).key_secret") }
    func allowlist(_ list: String) -> URL { self.directory.appendingPathComponent("allow/\(list)") }

    var brokerArguments: [String] {
        [
            "--curve-secret", self.secretFile("broker").path, "--allow-workers", self.allowlist("workers").path,
            "--allow-coordinators", self.allowlist("coordinators").path,
        ]
    }

    /// `--curve-secret NAME.key_secret --broker-key broker.key`.
    func arguments(for name: String) -> [String] {
        ["--curve-secret", self.secretFile(name).path, "--broker-key", self.publicFile("broker").path]
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
    /// CURVE keys of this cluster (nil: plain text): the broker, its workers and coordinators use them.
    let keys: TestKeys?

    /// - Parameters:
    ///   - brokerExtra: more `skynet broker` arguments (e.g. `--journal PATH`).
    ///   - curve: CURVE on, with fresh keys (`skynet keygen`) for the broker, a worker and a coordinator.
    init(workers count: Int, slots: Int = 4, brokerExtra: [String] = [], curve: Bool = false) async throws {
        self.keys = curve ? try await TestKeys() : nil
        let brokerExtra = brokerExtra + (self.keys?.brokerArguments ?? [])
        self.brokerExtra = brokerExtra
        self.broker = try await Self.startBroker(
            frontend: "tcp://127.0.0.1:*",
            backend: "tcp://127.0.0.1:*",
            extra: brokerExtra
        )
        self.brokers = [self.broker]
        guard let (frontend, backend) = ChildProcess.listening(in: self.broker.stdout) else {
            throw TestFailure("no endpoints on the broker's standard output: \(self.broker.stdout)")
        }
        self.frontend = frontend
        self.backend = backend
        for index in 0..<count {
            try await self.addWorker(name: "worker-\(Character(UnicodeScalar(UInt8(97 + index))))", slots: slots)
        }
    }

    private static func startBroker(frontend: String, backend: String, extra: [String]) async throws -> Spawned {
        let broker = try Spawned(["broker", "--frontend", frontend, "--backend", backend] + extra, name: "broker")
        guard await broker.listeningEndpoints(timeout: .seconds(10)) != nil else {
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

    /// Starts a worker and waits until the broker has registered it (its STATUS counts the READY).
    @discardableResult
    func addWorker(name: String, slots: Int = 4, extra: [String] = []) async throws -> Spawned {
        let before = try await self.registrations()
        let worker = try Spawned(
            ["worker", "--broker", self.backend, "--name", name, "--slots", "\(slots)"]
                + (self.keys?.arguments(for: "worker") ?? []) + extra,
            name: name
        )
        self.workers.append(worker)
        guard try await self.waitForStatus(timeout: .seconds(10), { $0.workersRegistered > before }) else {
            throw TestFailure("worker \(name) did not register: \(worker.stderr)")
        }
        return worker
    }

    /// Workers the current broker has registered.
    func registrations() async throws -> Int { try await self.status().workersRegistered }

    func submit(_ arguments: [String], name: String = "submit") throws -> Spawned {
        try Spawned(
            ["submit", "--broker", self.frontend] + (self.keys?.arguments(for: "coordinator") ?? []) + arguments,
            name: name
        )
    }

    /// The broker's STATUS snapshot, via `skynet status --json`.
    func status() async throws -> BrokerStatus {
        let process = try Spawned(
            ["status", "--broker", self.frontend, "--json"] + (self.keys?.arguments(for: "coordinator") ?? []),
            name: "status"
        )
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
        let from_cache: Int
        let identical: Int
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
