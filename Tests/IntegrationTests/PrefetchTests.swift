import Foundation
import SkyNet
import SkyNetCLI
import Testing

@testable import SkyNetCore

extension EndToEndTests {
    /// Samples the broker's status while `submit` runs; returns the most tasks leased to one worker
    /// seen, with the status that showed it.
    private func mostLeased(_ cluster: Cluster, while submit: Spawned) async throws -> (Int, BrokerStatus?) {
        var most = (0, BrokerStatus?.none)
        let deadline = ContinuousClock.now + .seconds(60)
        while submit.isRunning, ContinuousClock.now < deadline {
            guard let status = try? await cluster.status() else { continue }
            for worker in status.workers where worker.leased > most.0 { most = (worker.leased, status) }
        }
        return most
    }

    @Test(
        "a worker of short tasks is lent half as many again as its slots, and runs only its slots at once; --prefetch off and long tasks lend nothing"
    )
    func shortTasksLent() async throws {
        // 1 ms tasks: after eight results the 4-slot worker has two more tasks waiting for a slot.
        let short = try await Cluster(workers: 1, brokerExtra: ["--http", "127.0.0.1:0"])
        let url = try #require(await Self.dashboardURL(short.broker), "\(short.broker.stdout)")
        let submit = try short.submit(["--sectors", "8000", "--work", "1ms", "--fail-every", "0", "--json"])
        let lent = try await short.waitForStatus(timeout: .seconds(20)) { status in
            status.workers.contains { $0.leased == 6 && $0.slots == 4 && $0.lent == 2 }
        }
        let human = try runCommand(SkynetBinary.path, ["status", "--broker", short.frontend])
        // The gauges (a snapshot every 250 ms): what is lent, and busy slots that never exceed the slots.
        try await Task.sleep(for: .milliseconds(300))
        let samples = try JSONDecoder().decode(
            Scrape.self,
            from: Data(try await Self.python("metrics.py", [url + "metrics"]).utf8)
        ).samples
        #expect(await submit.waitForExit(timeout: .seconds(60)) == 0, "\(submit.stderr)")
        await short.shutdown()
        #expect(lent, "no worker was lent a task beyond its slots")
        #expect(human.contains("slots busy"), "\(human)")
        #expect(samples["skynet_worker_tasks_lent{worker=worker-a}"] == 2, "\(samples)")
        #expect(samples["skynet_worker_slots_busy{worker=worker-a}"].map { $0 <= 4 } == true, "\(samples)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 8000 && summary.completed == 8000)
        // The worker still ran at most its four at once.
        let peak = Cluster.field("peak.running", in: short.workers[0].stderr).flatMap { Int($0) }
        #expect((1...4).contains(peak ?? 0), "ran \(peak ?? -1) at once")

        // The same with the broker's lending off, and with long tasks: never more than the slots.
        let off = try await Cluster(workers: 1, brokerExtra: ["--prefetch", "off"])
        let offSubmit = try off.submit(["--sectors", "4000", "--work", "1ms", "--fail-every", "0", "--json"])
        let (offMost, offStatus) = try await self.mostLeased(off, while: offSubmit)
        #expect(await offSubmit.waitForExit(timeout: .seconds(60)) == 0, "\(offSubmit.stderr)")
        await off.shutdown()
        #expect(offMost == 4, "\(String(describing: offStatus))")

        let long = try await Cluster(workers: 1)
        let longSubmit = try long.submit(["--sectors", "120", "--work", "30ms", "--fail-every", "0", "--json"])
        let (longMost, longStatus) = try await self.mostLeased(long, while: longSubmit)
        #expect(await longSubmit.waitForExit(timeout: .seconds(60)) == 0, "\(longSubmit.stderr)")
        await long.shutdown()
        #expect(longMost == 4, "\(String(describing: longStatus))")
    }

    @Test(
        "skynet worker --prefetch auto (the broker's value, on the worker): an error that points to the broker's option"
    )
    func workerPrefetchAuto() async throws {
        let worker = try Spawned(["worker", "--prefetch", "auto"], name: "prefetch-auto")
        let exit = await worker.waitForExit(timeout: .seconds(10))
        #expect(exit != nil && exit != 0)
        #expect(worker.stderr.contains("skynet broker --prefetch"), "\(worker.stderr)")
    }
}
