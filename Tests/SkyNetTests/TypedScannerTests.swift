import Foundation
import Logging
import Synchronization
import Testing
import ZeroMQ

@testable import SkyNet
@testable import SkyNetCore

/// Counts the primes up to its input.
struct CountPrimes: TaskScanner {
    static let kind = "count-primes"
    func scan(_ limit: Int) async throws -> Int {
        guard limit >= 2 else { return 0 }
        var composite = [Bool](repeating: false, count: limit + 1)
        var count = 0
        for n in 2...limit where !composite[n] {
            count += 1
            var multiple = n * n
            while multiple <= limit {
                composite[multiple] = true
                multiple += n
            }
        }
        return count
    }
}

/// A Codable input and output (the JSON path); throws for a negative radius.
struct Area: TaskScanner {
    struct Circle: Codable, Sendable, Equatable {
        var name: String
        var radius: Double
    }
    struct Measured: Codable, Sendable, Equatable {
        var name: String
        var area: Double
    }
    static let kind = "area"
    func scan(_ circle: Circle) async throws -> Measured {
        guard circle.radius >= 0 else { throw ScannerError("negative radius \(circle.radius)") }
        return Measured(name: circle.name, area: Double.pi * circle.radius * circle.radius)
    }
}

/// Fails every input that is odd, counting the scans it ran.
struct EvenOnly: TaskScanner {
    static let kind = "even-only"
    let runs: Runs
    final class Runs: Sendable {
        let count = Mutex(0)
        var value: Int { self.count.withLock { $0 } }
    }
    func scan(_ value: Int) async throws -> String {
        self.runs.count.withLock { $0 += 1 }
        guard value % 2 == 0 else { throw ScannerError("odd \(value)", detail: [0, 1, 2, 255]) }
        return "even \(value)"
    }
}

/// Runs `body` with a coordinator connected to an embedded broker and `workers` workers of `scanners`.
func withTypedCluster<R: Sendable>(
    scanners: [any TaskScanner],
    workers: Int = 2,
    retry: RetryPolicy = .local(maxAttempts: 3),
    _ body: @escaping @Sendable (Coordinator) async throws -> R
) async throws -> R {
    let logger = {
        var logger = Logger(label: "typed-test")
        logger.logLevel = ProcessInfo.processInfo.environment["TYPED_DEBUG"] == nil ? .warning : .debug
        return logger
    }()
    return try await withReactor(name: "typed") { reactor in
        try await EmbeddedCluster.run(workers: workers, scanners: scanners, reactor: reactor, logger: logger) {
            endpoints in
            try await Coordinator.withCoordinator(
                configuration: CoordinatorConfiguration(
                    broker: endpoints.frontend,
                    retry: RetryPolicy(placement: retry.placement, maxAttempts: retry.maxAttempts, backoff: .none)
                ),
                reactor: reactor,
                logger: logger,
                scanners: []
            ) { coordinator in try await body(coordinator) }
        }
    }
}

@Suite("Typed scanners and their coding")
struct TypedScannerTests {
    @Test("fixed-width values, strings and bytes travel compactly; other Codable types as sorted JSON")
    func coding() throws {
        #expect(try ScanCoding.encode(1_000_000) == [0x40, 0x42, 0x0F, 0, 0, 0, 0, 0])
        #expect(try ScanCoding.decode(Int.self, from: ScanCoding.encode(-7)) == -7)
        #expect(try ScanCoding.decode(Double.self, from: ScanCoding.encode(2.5)) == 2.5)
        #expect(try ScanCoding.decode(Bool.self, from: [1]) == true)
        #expect(try ScanCoding.encode("héllo") == Array("héllo".utf8))
        #expect(try ScanCoding.encode([UInt8]([9, 0, 255])) == [9, 0, 255])
        let circle = Area.Circle(name: "c/1", radius: 2)
        #expect(String(decoding: try ScanCoding.encode(circle), as: UTF8.self) == #"{"name":"c/1","radius":2}"#)
        #expect(try ScanCoding.decode(Area.Circle.self, from: ScanCoding.encode(circle)) == circle)
        #expect(throws: ScanCodingError.self) { try ScanCoding.decode(Int.self, from: [1, 2, 3]) }
        #expect(throws: ScanCodingError.self) { try ScanCoding.decode(String.self, from: [0xFF]) }
        #expect(throws: ScanCodingError.self) { try ScanCoding.decode(Area.Circle.self, from: Array("{}".utf8)) }
        let request = ExecRequest(["gzip", "-9", "a b"], environment: ["K": "V"], sequence: 3)
        #expect(try ScanCoding.decode(ExecRequest.self, from: ScanCoding.encode(request)) == request)
        let output = ExecOutput(exitCode: 2, stdout: [0, 255], stderr: Array("x".utf8), stdoutBytes: 9)
        #expect(try ExecOutput(scanBytes: output.scanBytes) == output)
        #expect(output.stdoutTruncated && !output.stderrTruncated)
    }

    @Test("run returns the typed output; submit streams every input's output with its input")
    func roundTrips() async throws {
        try await withTypedCluster(scanners: [CountPrimes(), Area()]) { coordinator in
            #expect(try await coordinator.run(CountPrimes(), 1_000_000) == 78_498)
            let limits = [10, 100, 1000, 10_000, 0, 2]
            var seen: [Int: Int] = [:]
            for try await result in try await coordinator.submit(CountPrimes(), limits) {
                #expect(limits[result.index] == result.input)
                seen[result.input] = try result.get()
            }
            #expect(seen == [10: 4, 100: 25, 1000: 168, 10_000: 1229, 0: 0, 2: 1])
            let measured = try await coordinator.run(Area(), Area.Circle(name: "unit", radius: 1))
            #expect(measured == Area.Measured(name: "unit", area: Double.pi))
            do {
                _ = try await coordinator.run(Area(), Area.Circle(name: "bad", radius: -1))
                Issue.record("a negative radius completed")
            } catch let failure as TaskFailure {
                #expect(failure.message == "negative radius -1.0" && failure.attempts == 3)
            }
        }
    }

    @Test("a scanner's error reaches the caller as a TaskFailure with its message, detail and attempts")
    func errors() async throws {
        let runs = EvenOnly.Runs()
        try await withTypedCluster(scanners: [EvenOnly(runs: runs)]) { coordinator in
            await #expect(throws: TaskFailure.self) { try await coordinator.run(EvenOnly(runs: runs), 3) }
            do {
                _ = try await coordinator.run(EvenOnly(runs: runs), 5)
            } catch let failure as TaskFailure {
                #expect(failure.message == "odd 5" && failure.status == .failed && failure.attempts == 3)
                #expect(failure.detail == [0, 1, 2, 255])
                // The third attempt ran locally with the scanner passed to run.
                #expect(failure.system == "local")
            }
            var outcomes: [Int: String] = [:]
            for try await result in try await coordinator.submit(EvenOnly(runs: runs), [1, 2, 3, 4]) {
                outcomes[result.input] = result.output ?? "error: \(result.error?.message ?? "")"
            }
            #expect(outcomes == [1: "error: odd 1", 2: "even 2", 3: "error: odd 3", 4: "even 4"])
        }
    }

    @Test("through a cache: identical inputs run once, a re-run runs only what failed, failures are not stored")
    func cached() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-typed-\(UUID())").path
        let runs = EvenOnly.Runs()
        let inputs = [2, 4, 2, 5, 4, 2]
        try await withTypedCluster(scanners: [EvenOnly(runs: runs)], retry: .none()) { coordinator in
            let cache = try ResultCache(directory: directory)
            var first: [Int: String] = [:]
            for try await result in try await coordinator.submit(EvenOnly(runs: runs), inputs, cache: cache) {
                first[result.index] = result.output ?? "failed"
                #expect(!result.fromCache)
            }
            #expect(first == [0: "even 2", 1: "even 4", 2: "even 2", 3: "failed", 4: "even 4", 5: "even 2"])
            #expect(runs.value == 3)  // 2, 4 and 5, once each
            let summary = await coordinator.summary
            #expect(summary.tasks == 6 && summary.completed == 5 && summary.failed == 1 && summary.identical == 3)
            try await cache.close()

            let reopened = try ResultCache(directory: directory)
            #expect(await reopened.count == 2)
            var second: [Int: (String, Bool)] = [:]
            for try await result in try await coordinator.submit(EvenOnly(runs: runs), inputs, cache: reopened) {
                second[result.index] = (result.output ?? "failed", result.fromCache)
            }
            #expect(runs.value == 4)  // only 5 ran again: its failure was not stored
            #expect(second.count == 6 && second[3]?.0 == "failed" && second[3]?.1 == false)
            #expect(second.filter { $0.value.1 }.count == 5)
            let again = await coordinator.summary
            #expect(again.tasks == 6 && again.fromCache == 5 && again.completed == 5 && again.failed == 1)
            try await reopened.close()
        }
    }

    @Test("a Swift coordinator says when no worker serves a kind, and refuses a task too large to send")
    func unservedKindAndOversizedTask() async throws {
        let (said, tooLarge) = try await withTypedCluster(scanners: [EvenOnly(runs: EvenOnly.Runs())], workers: 1) {
            coordinator in
            let tooLarge = await #expect(throws: CoordinatorError.self) {
                _ = try await coordinator.submit([
                    ScanTask(kind: EvenOnly.kind, input: [UInt8](repeating: 0, count: 17 << 20))
                ])
            }
            let events = try await coordinator.submit([ScanTask(kind: "nope", input: [])])
            let said = try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask {
                    for try await batch in events where batch.contains(.noWorker(kind: "nope")) { return true }
                    return false
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(5))
                    return false
                }
                let first = try await group.next() ?? false
                group.cancelAll()
                return first
            }
            await coordinator.cancel(reason: "test over", grace: .milliseconds(100))
            return (said, tooLarge)
        }
        #expect(said, "noWorker(kind: \"nope\") within 5 s")
        #expect(tooLarge?.code == .taskTooLarge && tooLarge?.message.contains("task 1") == true)
    }

    @Test("exec from Swift: an ExecOutput back, or a TaskFailure whose detail is the command's ExecOutput")
    func execFromSwift() async throws {
        let worker = try ExecScanner(allowing: ["/bin/sh"])
        try await withTypedCluster(scanners: [worker], retry: .remote(maxAttempts: 2)) { coordinator in
            let local = try ExecScanner(allowing: [])
            let output = try await coordinator.run(local, ExecRequest(["sh", "-c", "echo hi; echo err >&2"]))
            #expect(output.succeeded && output.stdout == Array("hi\n".utf8) && output.stderr == Array("err\n".utf8))
            do {
                _ = try await coordinator.run(local, ExecRequest(["sh", "-c", "echo partial; exit 3"]))
                Issue.record("exit 3 completed")
            } catch let failure as TaskFailure {
                #expect(failure.message == "exit status 3" && failure.attempts == 2)
                let detail = try ExecOutput(scanBytes: failure.detail)
                #expect(detail.exitCode == 3 && detail.stdout == Array("partial\n".utf8))
            }
        }
    }
}
