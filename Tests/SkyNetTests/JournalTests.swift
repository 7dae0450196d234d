import Foundation
import Synchronization
import Testing

@testable import SkyNet
@testable import SkyNetCore

@Suite("Broker journal")
struct JournalTests {
    /// A fresh journal path in a temporary directory of its own.
    static func temporaryPath() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-journal-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appendingPathComponent("broker.journal").path
    }

    /// Opens a journal whose commits are counted and which records failures as test issues.
    static func open(_ path: String) throws -> (Journal, JournalRecovery, Committed) {
        let committed = Committed()
        let (journal, recovery) = try Journal.open(
            path: path,
            onCommit: { seq in committed.value.withLock { $0 = max($0, seq) } },
            onFailure: { error in Issue.record("journal failed: \(error)") }
        )
        return (journal, recovery, committed)
    }

    final class Committed: Sendable {
        let value = Mutex<UInt64>(0)
        func wait(for seq: UInt64) async -> Bool {
            for _ in 0..<500 {
                if self.value.withLock({ $0 }) >= seq { return true }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return false
        }
    }

    static let coordinator = PeerID(Array("c-test".utf8))
    static func submit(_ task: ScanTask, attempt: UInt32 = 1) -> JournalRecord {
        .submit(task.id, coordinator: coordinator, attempt: attempt, task.envelope, input: task.input)
    }

    @Test("every record kind survives framing and parsing")
    func roundTrip() {
        let task = ScanTask.sector(7, work: .milliseconds(5), failEvery: 3)
        let records: [JournalRecord] = [
            Self.submit(task),
            .attempt(task.id, 2),
            .result(task.id, coordinator: Self.coordinator, frames: [[1, 2, 3], [], Array("out".utf8)]),
            .forget(task.id),
            .jobOwner(job: task.id, key: "k"),
            .jobName(job: task.id, name: "nightly-build"),
        ]
        let image = records.flatMap { $0.framed() }
        let (parsed, good) = Journal.parse(image)
        #expect(parsed == records)
        #expect(good == image.count)
        #expect(JournalRecovery.replay(records).jobNames == [task.id: "nightly-build"])
    }

    @Test("replay keeps accepted tasks without results, in order, and results not forgotten")
    func replay() {
        let a = ScanTask.sector(1)
        let b = ScanTask.sector(2)
        let c = ScanTask.sector(3)
        let d = ScanTask.sector(4)
        let recovery = JournalRecovery.replay([
            Self.submit(a), Self.submit(b), Self.submit(c), Self.submit(d),
            .attempt(b.id, 2),
            .result(a.id, coordinator: Self.coordinator, frames: [[9]]),
            .forget(c.id),
            // d failed and was submitted again for attempt 2: queued again, its old result gone.
            .result(d.id, coordinator: Self.coordinator, frames: [[8]]),
            Self.submit(d, attempt: 2),
        ])
        #expect(recovery.pending.map(\.id) == [b.id, d.id])
        #expect(recovery.pending.map(\.attempt) == [2, 2])
        #expect(Array(recovery.results.keys) == [a.id])
        #expect(recovery.results[a.id]?.frames == [[9]])
    }

    @Test("what is committed is there after reopening; a torn tail is cut off and reported")
    func reopenAndTornTail() async throws {
        let path = try Self.temporaryPath()
        let tasks = (1...100).map { ScanTask.sector($0) }
        do {
            let (journal, recovery, committed) = try Self.open(path)
            #expect(recovery.pending.isEmpty && recovery.records == 0)
            var last: UInt64 = 0
            for task in tasks { last = journal.append(Self.submit(task)) }
            #expect(await committed.wait(for: last))
            journal.close()
        }
        // A crash in the middle of a write leaves half a record.
        let whole = try Data(contentsOf: URL(fileURLWithPath: path))
        let half = Array(Self.submit(ScanTask.sector(101)).framed().prefix(20))
        try (whole + Data(half)).write(to: URL(fileURLWithPath: path))
        let (journal, recovery, _) = try Self.open(path)
        defer { journal.close() }
        #expect(recovery.pending.map(\.id) == tasks.map(\.id))
        #expect(recovery.droppedBytes == 20)
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int
        // Opening compacts nothing by itself; the tail is cut off the file.
        #expect(size == whole.count)
    }

    @Test("a corrupt record ends the readable journal there; nothing after it is trusted")
    func corruptRecord() throws {
        let records = (1...3).map { Self.submit(ScanTask.sector($0)) }
        var image = records.flatMap { $0.framed() }
        let second = records[0].framed().count
        image[second + 12] ^= 0xFF  // a payload byte of the second record: its CRC no longer matches
        let (parsed, good) = Journal.parse(image)
        #expect(parsed == [records[0]])
        #expect(good == second)
        // Garbage of every kind parses to nothing and never traps.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let noise = (0..<Int.random(in: 0...64, using: &generator)).map { _ in UInt8.random(in: 0...255) }
            _ = Journal.parse(noise)
        }
    }

    @Test("compaction replaces the file with the snapshot, and later appends follow it")
    func compaction() async throws {
        let path = try Self.temporaryPath()
        let keep = ScanTask.sector(1)
        let later = ScanTask.sector(3)
        do {
            let (journal, _, committed) = try Self.open(path)
            for sector in 1...500 { journal.append(Self.submit(ScanTask.sector(sector))) }
            journal.compact([Self.submit(keep)])
            let last = journal.append(Self.submit(later))
            #expect(await committed.wait(for: last))
            journal.close()
        }
        let (journal, recovery, _) = try Self.open(path)
        defer { journal.close() }
        #expect(recovery.pending.map(\.id) == [keep.id, later.id])
        #expect(recovery.records == 2)
        #expect(!FileManager.default.fileExists(atPath: path + ".compact"))
    }

    @Test("an unreadable journal path is a clear error")
    func badPath() {
        #expect(throws: JournalError.self) {
            _ = try Journal.open(path: "/nonexistent-dir/x.journal", onCommit: { _ in }, onFailure: { _ in })
        }
    }
}
