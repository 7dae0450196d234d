import Foundation
import SkyNet
import Testing

/// Broker restarts, durable mode and the chaos suite: real processes, real SIGKILL, a real journal.
/// An extension of ``EndToEndTests`` so that it is serialized with the other process tests.
extension EndToEndTests {
    @Test("broker SIGKILLed mid-run and restarted without a journal: the coordinator sends its unfinished tasks again")
    func brokerRestartInMemory() async throws {
        let cluster = try await Cluster(workers: 2)
        let submit = try cluster.submit(["--sectors", "120", "--work", "50ms", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 20 })
        try await cluster.killAndRestartBroker()
        let status = await submit.waitForExit(timeout: .seconds(60))
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 120)
        #expect(Set(results.map(\.id)).count == 120, "one final result per task")
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(summary.completed == 120)
        #expect(submit.stderr.contains("broker restarted"), "\(submit.stderr)")
        // The workers noticed the new broker and registered with it.
        #expect(Cluster.count("worker registered", in: cluster.broker.stderr) == 2, "\(cluster.broker.stderr)")
    }

    @Test("durable broker SIGKILLed mid-run: accepted tasks are queued again from the journal, all complete once")
    func durableBrokerRestart() async throws {
        let journal = try JournalPath()
        let cluster = try await Cluster(workers: 2, brokerExtra: ["--journal", journal.path])
        let submit = try cluster.submit(["--sectors", "300", "--work", "20ms", "--fail-every", "0", "--json"])
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 40 })
        try await cluster.killAndRestartBroker()
        let status = await submit.waitForExit(timeout: .seconds(60))
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 300)
        #expect(Set(results.map(\.id)).count == 300, "one final result per task")
        #expect(Set(results.compactMap(\.sector)) == Set(1...300))
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(summary.completed == 300)
        // The restarted broker found the accepted, unfinished tasks on disk and queued them again.
        let log = cluster.broker.stderr
        let queued = Cluster.field("queued", in: log).flatMap(Int.init) ?? 0
        let records = Cluster.field("records", in: log).flatMap(Int.init) ?? 0
        #expect(queued > 0 && records > 0, "\(log)")
        // A second broker on the same journal is refused with a one-line error while the first runs.
        let arguments = ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"]
        let holder = try Spawned(arguments + ["--journal", journal.path], name: "holder")
        #expect(await holder.waitForStderr(timeout: .seconds(10)) { $0.contains("broker listening") })
        let intruder = try Spawned(arguments + ["--journal", journal.path], name: "intruder")
        let refused = await intruder.waitForExit(timeout: .seconds(10))
        _ = await holder.stop()
        #expect(refused != nil && refused != 0)
        #expect(intruder.stderr.contains("in use by another broker"), "\(intruder.stderr)")
    }
}

/// A journal path in a fresh temporary directory, removed when done.
final class JournalPath {
    let directory: URL
    var path: String { self.directory.appendingPathComponent("broker.journal").path }

    init() throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-journal-\(UUID())")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: self.directory) }
}
