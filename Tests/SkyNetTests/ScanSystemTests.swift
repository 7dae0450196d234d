import Synchronization
import Testing

@testable import SkyNet
@testable import SkyNetCore

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

/// Answers at once when the input's first byte is 0, fails at once when it is 1, else waits.
private struct QuickScanner: TaskScanner {
    static let kind = "quick"
    func scan(_ input: [UInt8]) async throws -> [UInt8] {
        try await Task.sleep(for: .milliseconds(100))
        return [2]
    }
    func scanImmediately(_ input: [UInt8]) throws -> [UInt8]? {
        switch input.first {
        case 0: [0]
        case 1: throw ScannerError("quick failure")
        default: nil
        }
    }
}

/// Answers `value` at once.
private struct Answer: TaskScanner {
    static let kind = "answer"
    let value: UInt8
    func scan(_ input: [UInt8]) async throws -> [UInt8] { [self.value] }
}

private struct SlowScanner: TaskScanner {
    static let kind = "slow"
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
        guard case .failed(let reason, _) = missing.outcome else {
            Issue.record("expected failure")
            return
        }
        #expect(reason.contains("no scanner for kind \"nope\""))
        let task = Task { await system.run(ScanTask(kind: "slow", input: [200])) }
        try? await Task.sleep(for: .milliseconds(20))
        task.cancel()
        #expect(await task.value.outcome == .cancelled)
    }

    @Test("a kind given twice runs its last scanner, with the others found by their kinds")
    func kindGivenTwice() async {
        let system = ScanSystem(
            name: "test",
            slots: 1,
            scanners: [Answer(value: 1), QuickScanner(), SectorScanner(), Answer(value: 3)]
        )
        #expect(await system.run(ScanTask(kind: Answer.kind, input: [])).outcome == .completed([3]))
        #expect(await system.run(ScanTask(kind: QuickScanner.kind, input: [5])).outcome == .completed([2]))
        guard case .failed = await system.run(ScanTask(kind: "nope", input: [])).outcome else {
            Issue.record("a kind no scanner serves must fail")
            return
        }
    }

    @Test("sector scans are deterministic and every Nth attempt in the process fails")
    func sectorScanner() async throws {
        let scanner = SectorScanner(api: UnreliableAPI())
        let output = try await scanner.scan(SectorInput(sector: 9, work: .zero, failEvery: 0).encode())
        #expect(String(decoding: output, as: UTF8.self) == SectorScanner.expectedOutput(sector: 9))
        #expect(SectorScanner.expectedOutput(sector: 9).hasPrefix("sector 9: "))
        // "sector N: S signals", N as Swift prints it (the sign, the extremes), S from 0 to 7.
        for sector: Int64 in [0, 1, 10, 12_345, -1, -907, .max, .min] {
            let text = SectorScanner.expectedOutput(sector: sector)
            let prefix = "sector \(sector): "
            #expect(text.hasPrefix(prefix) && text.hasSuffix(" signals"), "\(text)")
            let signals = text.dropFirst(prefix.count).dropLast(" signals".count)
            #expect(Int(signals).map { (0...7).contains($0) } == true, "\(text)")
        }
        var failures = 0
        for sector in 0..<30 {
            do {
                _ = try await scanner.scan(SectorInput(sector: Int64(sector), work: .zero, failEvery: 3).encode())
            } catch {
                failures += 1
                #expect("\(error)".contains("UnreliableAPI"))
            }
        }
        // This scanner's own count: attempts 3, 6, …, 30 fail, on distinct sectors.
        #expect(failures == 10)
        #expect(scanner.api.calls == 31)
        // The same sector does not fail twice in a row; with failEvery 1, every attempt fails.
        let flaky = SectorScanner(api: UnreliableAPI())
        var outcomes: [Bool] = []
        for _ in 0..<4 {
            outcomes.append((try? await flaky.scan(SectorInput(sector: 1, work: .zero, failEvery: 2).encode())) != nil)
        }
        #expect(outcomes == [true, false, true, false])
        var always = 0
        for _ in 0..<3 {
            do {
                _ = try await flaky.scan(SectorInput(sector: 2, work: .zero, failEvery: 1).encode())
            } catch {
                always += 1
            }
        }
        #expect(always == 3)
        #expect(throws: ProtocolError.self) { try SectorInput.decode([1, 2, 3]) }
    }

    @Test("a sector input read in place (its usual 20 bytes loaded at once) is the one the reader makes")
    func sectorInputInPlace() throws {
        var inputs = [
            SectorInput(sector: 0, work: .zero, failEvery: 0),
            SectorInput(sector: .min, work: .microseconds(1), failEvery: .max),
            SectorInput(sector: .max, work: .seconds(3), failEvery: 7, cpuBound: true),
            SectorInput(sector: -5, work: .milliseconds(2), failEvery: 1, cpuBound: false),
        ]
        for _ in 0..<500 {
            inputs.append(
                SectorInput(
                    sector: .random(in: .min ... .max),
                    work: .microseconds(Int64.random(in: 0...10_000_000)),
                    failEvery: .random(in: 0 ... .max),
                    cpuBound: .random()
                )
            )
        }
        for input in inputs {
            let bytes = input.encode()
            let inPlace = try bytes.withUnsafeBytes { raw throws(ProtocolError) in try SectorInput.decode(raw) }
            #expect(inPlace == (try SectorInput.decode(bytes)) && inPlace == input, "\(input)")
        }
        // Nanoseconds past Int64 are clamped alike; wrong lengths and unknown flags are refused alike.
        var huge = SectorInput(sector: 1, work: .zero, failEvery: 0).encode()
        for i in 8..<16 { huge[i] = 0xFF }
        let hugeInPlace = try huge.withUnsafeBytes { raw throws(ProtocolError) in try SectorInput.decode(raw) }
        #expect(hugeInPlace == (try SectorInput.decode(huge)) && hugeInPlace.work == .nanoseconds(Int64.max))
        for bad in [
            [UInt8](repeating: 0, count: 19), [UInt8](repeating: 0, count: 20) + [2], [UInt8](repeating: 0, count: 22),
        ] {
            #expect(throws: ProtocolError.self) {
                try bad.withUnsafeBytes { raw throws(ProtocolError) in try SectorInput.decode(raw) }
            }
        }
    }

    @Test("runImmediately answers at once in a free slot, and keeps the slot cap and counters")
    func runImmediately() async throws {
        let system = ScanSystem(name: "test", slots: 2, scanners: [QuickScanner(), SlowScanner(gauge: Gauge())])
        let done = try #require(system.runImmediately(ScanTask(kind: "quick", input: [0])))
        #expect(done.outcome == .completed([0]) && done.system == "test" && done.busy == 1)
        let failed = try #require(system.runImmediately(ScanTask(kind: "quick", input: [1])))
        #expect(failed.outcome == .failed("quick failure"))
        // A scan that has to wait, or an unknown kind: nil, and nothing is counted or held.
        #expect(system.runImmediately(ScanTask(kind: "quick", input: [9])) == nil)
        #expect(system.runImmediately(ScanTask(kind: "slow", input: [1])) == nil)
        #expect(system.runImmediately(ScanTask(kind: "nope", input: [])) == nil)
        #expect(await system.completedCount == 1)
        #expect(await system.failedCount == 1)
        #expect(await system.count == 0)
        #expect(await system.running == 0)
        // Both slots busy with slow scans: no immediate scan may take a third.
        let slow = (0..<2).map { _ in Task { await system.run(ScanTask(kind: "slow", input: [100])) } }
        while await system.running < 2 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(system.runImmediately(ScanTask(kind: "quick", input: [0])) == nil)
        for task in slow { #expect(await task.value.outcome == .completed([100])) }
        #expect(system.runImmediately(ScanTask(kind: "quick", input: [0]))?.outcome == .completed([0]))
        #expect(await system.peakRunning == 2)
        #expect(await system.count == 0)
    }

    @Test("a sector scan without work is answered at once; with work it is not, and is not counted")
    func sectorScanImmediately() throws {
        let scanner = SectorScanner(api: UnreliableAPI())
        let output = try scanner.scanImmediately(SectorInput(sector: 7, work: .zero, failEvery: 0).encode())
        #expect(output.map { String(decoding: $0, as: UTF8.self) } == SectorScanner.expectedOutput(sector: 7))
        #expect(
            try scanner.scanImmediately(SectorInput(sector: 7, work: .milliseconds(1), failEvery: 1).encode()) == nil
        )
        #expect(throws: ScannerError.self) {
            try scanner.scanImmediately(SectorInput(sector: 987_654, work: .zero, failEvery: 1).encode())
        }
        #expect(throws: ProtocolError.self) { try scanner.scanImmediately([1, 2]) }
    }

    @Test("a worker's in-place sector scan says what scanImmediately says, once, or nothing when it must wait")
    func sectorScanInPlace() throws {
        let scanner = SectorScanner(api: UnreliableAPI())
        func inPlace(_ input: [UInt8]) throws -> [[UInt8]] {
            var outputs: [[UInt8]] = []
            try input.withUnsafeBytes { bytes in try scanner._scanImmediately(bytes) { outputs.append(Array($0)) } }
            return outputs
        }
        for sector in [0, 7, -5, Int64.min, Int64.max] {
            let input = SectorInput(sector: sector, work: .zero, failEvery: 0).encode()
            let expected = try #require(try scanner.scanImmediately(input))
            #expect(try inPlace(input) == [expected], "\(sector)")
        }
        #expect(try inPlace(SectorInput(sector: 3, work: .milliseconds(1), failEvery: 1).encode()).isEmpty)
        #expect(throws: ScannerError.self) {
            try inPlace(SectorInput(sector: 987_655, work: .zero, failEvery: 1).encode())
        }
        #expect(throws: ProtocolError.self) { try inPlace([1, 2]) }
    }

    @Test("random task ids are distinct version-4 UUIDs")
    func randomIDs() {
        let ids = (0..<1_000).map { _ in TaskID.random() }
        #expect(Set(ids).count == ids.count)
        #expect(ids.allSatisfy { $0.high >> 12 & 0xF == 4 && $0.low >> 62 == 0b10 })
    }

    @Test("sector input round-trips")
    func sectorInput() throws {
        let input = SectorInput(sector: -5, work: .milliseconds(250), failEvery: 10)
        #expect(try SectorInput.decode(input.encode()) == input)
        #expect(input.encode().count == 20)
        let spinning = SectorInput(sector: .min, work: .nanoseconds(1_000), failEvery: .max, cpuBound: true)
        #expect(try SectorInput.decode(spinning.encode()) == spinning && spinning.encode().count == 21)
        // Little-endian, field by field: sector, work in nanoseconds, failEvery, flags.
        #expect(
            SectorInput(sector: 1, work: .microseconds(2), failEvery: 3, cpuBound: true).encode()
                == [1, 0, 0, 0, 0, 0, 0, 0, 0xD0, 0x07, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1]
        )
        // Read in place (as a worker reads a TASK's frame), the same.
        #expect(try spinning.encode().withUnsafeBytes { try SectorInput.decode($0) } == spinning)
        #expect(ScanTask.sector(42, work: .seconds(1)).sector == 42)
    }
}

@Suite("Sector input read in place")
struct SectorInputInPlaceTests {
    @Test("the sector read in place agrees with the decoder, for every length and flag byte")
    func sectorInPlace() {
        var inputs: [[UInt8]] = [
            SectorInput(sector: -42, work: .milliseconds(3), failEvery: 7).encode(),
            SectorInput(sector: .max, work: .zero, failEvery: 0, cpuBound: true).encode(),
            [], [1, 2, 3],
        ]
        let base = SectorInput(sector: 123_456, work: .zero, failEvery: 0).encode()
        for flags: UInt8 in [0, 1, 2, 3, 0x80] { inputs.append(base + [flags]) }
        inputs.append(base + [0, 0])
        inputs.append(Array(base.dropLast()))
        for input in inputs {
            let decoded = try? SectorInput.decode(input)
            #expect(input.withUnsafeBytes { SectorInput.sector(of: $0) } == decoded?.sector, "\(input)")
            let task = ScanTask(kind: SectorScanner.kind, input: input)
            #expect(task.sector == decoded.map { Int($0.sector) })
        }
        #expect(ScanTask(kind: "other", input: base).sector == nil)
    }
}
