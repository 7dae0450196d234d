import Synchronization
import Testing

@testable import SkyNet

/// Counts concurrent scans.
private final class Gauge: Sendable {
    let state = Mutex((now: 0, peak: 0))
    func enter() {
        self.state.withLock {
            $0.now += 1
            $0.peak = max($0.peak, $0.now)
        }
    }
    func leave() { self.state.withLock { $0.now -= 1 } }
    var peak: Int { self.state.withLock { $0.peak } }
}

private struct SlowScanner: Scanner {
    let kind = "slow"
    let gauge: Gauge
    func scan(_ input: [UInt8]) async throws -> [UInt8] {
        self.gauge.enter()
        defer { self.gauge.leave() }
        try await Task.sleep(for: .milliseconds(Int(input.first ?? 5)))
        return input
    }
}

@Suite("ScanSystem and the sector scanner")
struct ScanSystemTests {
    @Test("never runs more scans at once than it has slots")
    func slotCap() async {
        let gauge = Gauge()
        let system = ScanSystem(name: "test", slots: 4, scanners: [SlowScanner(gauge: gauge)])
        let results = await withTaskGroup(of: ScanResult.self) { group in
            for _ in 0..<40 { group.addTask { await system.run(ScanTask(kind: "slow", input: [5])) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 40)
        #expect(results.allSatisfy { $0.outcome == .completed([5]) })
        #expect(gauge.peak == 4)
        #expect(await system.peakRunning == 4)
        #expect(results.allSatisfy { (0..<4).contains($0.slot) && (1...4).contains($0.busy) })
        #expect(await system.count == 0)
    }

    @Test("a timeout, a missing scanner and cancellation become outcomes")
    func outcomes() async {
        let system = ScanSystem(name: "test", slots: 1, scanners: [SlowScanner(gauge: Gauge())])
        let timedOut = await system.run(ScanTask(kind: "slow", input: [200], timeout: .milliseconds(20)))
        #expect(timedOut.outcome == .timedOut)
        let missing = await system.run(ScanTask(kind: "nope", input: []))
        guard case .failed(let reason) = missing.outcome else {
            Issue.record("expected failure")
            return
        }
        #expect(reason.contains("no scanner for kind \"nope\""))
        let task = Task { await system.run(ScanTask(kind: "slow", input: [200])) }
        try? await Task.sleep(for: .milliseconds(20))
        task.cancel()
        #expect(await task.value.outcome == .cancelled)
    }

    @Test("sector scans are deterministic and every Nth attempt in the process fails")
    func sectorScanner() async throws {
        let scanner = SectorScanner()
        let output = try await scanner.scan(SectorInput(sector: 9, work: .zero, failEvery: 0).encode())
        #expect(String(decoding: output, as: UTF8.self) == SectorScanner.expectedOutput(sector: 9))
        #expect(SectorScanner.expectedOutput(sector: 9).hasPrefix("sector 9: "))
        var failures = 0
        for sector in 0..<30 {
            do {
                _ = try await scanner.scan(SectorInput(sector: Int64(sector), work: .zero, failEvery: 3).encode())
            } catch {
                failures += 1
                #expect("\(error)".contains("UnreliableAPI"))
            }
        }
        // The process-wide counter is shared with other tests running in parallel, so at least 10 of
        // these 30 attempts hit a multiple of 3 only if nothing else ran; allow for interleaving.
        #expect(failures >= 1)
        #expect(throws: ProtocolError.self) { try SectorInput.decode([1, 2, 3]) }
    }

    @Test("sector input round-trips")
    func sectorInput() throws {
        let input = SectorInput(sector: -5, work: .milliseconds(250), failEvery: 10)
        #expect(try SectorInput.decode(input.encode()) == input)
        #expect(ScanTask.sector(42, work: .seconds(1)).sector == 42)
    }
}
