import Foundation
import Logging
@testable import SkyNet
@testable import SkyNetCore
import SkyNetCLI
import Synchronization
import Testing
import ZeroMQ

/// Real `skynet` processes talking ZeroMQ over TCP on loopback. Serialized: they share two cores.
@Suite("End to end with real processes", .serialized)
struct EndToEndTests {
    @Test(
        "200 sectors on 2 workers with failures: each completes exactly once, failures re-run locally, slots respected"
    )
    func twoHundredWithFailures() async throws {
        let cluster = try await Cluster(workers: 2)
        let submit = try cluster.submit(["--sectors", "200", "--fail-every", "10", "--work", "10ms", "--json"])
        let status = await submit.waitForExit(timeout: .seconds(60))
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 200)
        #expect(Set(results.map(\.id)).count == 200, "one final result per task")
        #expect(Set(results.compactMap(\.sector)) == Set(1...200))
        for line in results {
            #expect(line.status == "completed")
            #expect(line.result == SectorScanner.expectedOutput(sector: Int64(line.sector ?? -1)))
        }
        // Each worker fails every 10th of its attempts, so about 20 tasks fail once and re-run locally.
        let local = results.filter { $0.system == "local" }
        #expect(local.count >= 10)
        #expect(local.allSatisfy { $0.attempts >= 2 })
        #expect(summary.completed == 200 && summary.failed == 0 && summary.duplicates == 0)
        #expect(summary.retried_locally >= local.count, "a local re-run can itself fail and re-run")
        #expect(Set(results.map(\.system)).isSuperset(of: ["worker-a", "worker-b", "local"]))
        // What each worker reports about itself when it stops: never more scans at once than its slots.
        for worker in cluster.workers {
            let peak = Cluster.field("peak.running", in: worker.stderr).flatMap { Int($0) }
            #expect(peak != nil, "worker report missing: \(worker.stderr)")
            #expect((1...4).contains(peak ?? 0), "\(worker.name) ran \(peak ?? -1) at once")
        }
    }

    @Test("SIGKILL of a worker mid-run: its tasks are requeued and all still complete exactly once")
    func killWorkerMidRun() async throws {
        let cluster = try await Cluster(workers: 2)
        let submit = try cluster.submit(["--sectors", "200", "--work", "40ms", "--fail-every", "0", "--json"])
        // Kill it once it holds leases and some results have come back.
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 40 && $0.leased == 8 })
        let victim = cluster.workers[0]
        victim.signal(SIGKILL)
        let status = await submit.waitForExit(timeout: .seconds(60))
        await cluster.shutdown()
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, summary) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 200)
        #expect(Set(results.map(\.id)).count == 200)
        #expect(results.allSatisfy { $0.status == "completed" })
        #expect(summary.requeued >= 1, "the killed worker held leases")
        let requeued = results.filter { $0.attempts >= 2 }
        #expect(!requeued.isEmpty)
        #expect(requeued.allSatisfy { $0.system != "worker-a" }, "requeued tasks ran elsewhere")
        #expect(cluster.broker.stderr.contains("worker-a") || cluster.broker.stderr.contains("unreachable"))
    }

    @Test("SIGTERM on a worker: it finishes its running scans, then exits 0")
    func workerDrains() async throws {
        let cluster = try await Cluster(workers: 1)
        let submit = try cluster.submit(["--sectors", "4", "--work", "1s", "--json"])
        let worker = cluster.workers[0]
        // Wait until the worker has its four tasks, then ask it to stop.
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.leased == 4 })
        worker.signal(SIGTERM)
        let workerStatus = await worker.waitForExit(timeout: .seconds(10))
        let status = await submit.waitForExit(timeout: .seconds(20))
        await cluster.shutdown()
        #expect(workerStatus == 0, "worker: \(worker.stderr)")
        #expect(worker.stderr.contains("draining"))
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, _) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 4)
        #expect(results.allSatisfy { $0.system == "worker-a" && $0.attempts == 1 }, "finished by the draining worker")
    }

    @Test("a broker fed garbage on both ports keeps serving a well-behaved coordinator")
    func garbageFrames() async throws {
        let cluster = try await Cluster(workers: 1)
        try Garbage.send(frontend: cluster.frontend, backend: cluster.backend)
        // The broker has read (and dropped) the garbage once its STATUS counts it.
        let counted = try await cluster.waitForStatus(timeout: .seconds(10)) {
            $0.badInput.values.reduce(0, +) >= 8
        }
        #expect(counted, "the garbage was never counted as bad input")
        let submit = try cluster.submit(["--sectors", "50", "--work", "1ms", "--fail-every", "0", "--json"])
        let status = await submit.waitForExit(timeout: .seconds(30))
        #expect(status == 0, "submit: \(submit.stderr)")
        let (results, _) = try parseJSONOutput(submit.stdout)
        #expect(results.count == 50 && results.allSatisfy { $0.status == "completed" })
        let parsed = try await cluster.status()
        #expect(parsed.badInput.values.reduce(0, +) >= 8, "bad input counted: \(parsed.badInput)")
        #expect(parsed.workers.count == 1, "the real worker is still registered")
        #expect(cluster.broker.isRunning)
        await cluster.shutdown()
        #expect(cluster.broker.stderr.contains("bad input dropped"))
    }

    @Test(
        "on the wire: a BATCH of SUBMITs all complete; a task whose RESULT comes first gets no ACCEPTED; a sender that reads ACCEPTED lists gets one"
    )
    func batchesOnTheWire() async throws {
        let cluster = try await Cluster(workers: 1)
        do {
            try await self.talkBatches(to: cluster.frontend)
        } catch {
            await cluster.shutdown()
            throw error
        }
        await cluster.shutdown()
    }

    private func talkBatches(to frontend: String) async throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try Socket(context, type: .dealer)
        defer { socket.close() }
        // 42 bytes: longer than the 32 the broker keeps inline (PeerID), so this also covers long ids.
        try socket.set(.routingID(Array("c-raw-\(UUID())".utf8)))
        try socket.set(.linger(milliseconds: 0))
        try socket.connect(frontend)
        /// What arrives (BATCHes unpacked) until `done` says so; fails after 10 s.
        func receive(until done: ([WireMessage]) -> Bool) async throws -> [WireMessage] {
            var messages: [WireMessage] = []
            let deadline = ContinuousClock.now + .seconds(10)
            while !done(messages) {
                guard let message = try socket.receive() else {
                    guard ContinuousClock.now < deadline else { throw CancellationError() }
                    try await Task.sleep(for: .microseconds(200))
                    continue
                }
                let decoded = try WireMessage.decode(message)
                if case .batch(let inner) = decoded {
                    messages += try inner.map { try WireMessage.decode($0) }
                } else {
                    messages.append(decoded)
                }
            }
            return messages
        }
        func results(_ messages: [WireMessage]) -> Set<TaskID> {
            Set(messages.compactMap { if case .result(let id, _, .completed, _, _) = $0 { id } else { nil } })
        }
        func accepted(_ messages: [WireMessage]) -> Set<TaskID> {
            Set(messages.compactMap { if case .accepted(let id, _, _) = $0 { id } else { nil } })
        }

        // 50 SUBMITs in one BATCH: 50 RESULTs come back, and an ACCEPTED only for a task still at the
        // broker 2 ms after its SUBMIT.
        let tasks = (1...50).map { ScanTask.sector($0) }
        let batch = WireMessage.batch(
            tasks.map { WireMessage.submit($0.id, attempt: 1, $0.envelope, input: $0.input).encode() }
        )
        #expect(try socket.send(batch.encode()) == .sent)
        let first = try await receive { results($0).count == 50 }
        #expect(results(first) == Set(tasks.map(\.id)))
        #expect(accepted(first).isSubset(of: Set(tasks.map(\.id))))

        // A task no worker can take waits at the broker: its ACCEPTED comes (after about 2 ms).
        let waiting = ScanTask(kind: "no-such-kind", input: [])
        _ = try socket.send(WireMessage.submit(waiting.id, attempt: 1, waiting.envelope, input: []).encode())
        let clock = ContinuousClock()
        let sent = clock.now
        let second = try await receive { accepted($0).contains(waiting.id) }
        #expect(clock.now - sent < .seconds(2), "ACCEPTED took \(clock.now - sent)")
        #expect(results(second).isEmpty)

        // Tasks no worker takes, from a sender whose SUBMITs say it reads ACCEPTED lists: their first
        // ACCEPTEDs come as one list (the SUBMITs above did not say so, and got one each).
        let listed = (1...5).map { _ in ScanTask(kind: "no-such-kind", input: []) }
        let flagged = WireMessage.batch(
            listed.map { task in
                var frames = WireMessage.submit(task.id, attempt: 1, task.envelope, input: []).encode()
                frames[0] = Header(.submit, flags: Header.readsAcceptedListsFlag, attempt: 1, taskID: task.id).encode()
                return frames
            }
        )
        #expect(try socket.send(flagged.encode()) == .sent)
        func lists(_ messages: [WireMessage]) -> [[AcceptedTask]] {
            messages.compactMap { if case .acceptedList(let tasks) = $0 { tasks } else { nil } }
        }
        let third = try await receive { !lists($0).isEmpty }
        #expect(lists(third).map { $0.map(\.id) } == [listed.map(\.id)])
        #expect(lists(third).first?.allSatisfy { $0.attempt == 1 } == true)
        #expect(accepted(third).isDisjoint(with: listed.map(\.id)))

        // One lone task at a time: its RESULT comes well within the 2 ms hold, so no ACCEPTED.
        var lonelyAccepted = 0
        for sector in 1...20 {
            let task = ScanTask.sector(sector)
            _ = try socket.send(WireMessage.submit(task.id, attempt: 1, task.envelope, input: task.input).encode())
            let messages = try await receive { results($0).contains(task.id) }
            if accepted(messages).contains(task.id) { lonelyAccepted += 1 }
        }
        // A loaded machine can take longer than 2 ms now and then, so some may get one; if every one
        // did, the broker would not be holding ACCEPTEDs at all.
        #expect(lonelyAccepted < 20, "\(lonelyAccepted) of 20 lone tasks still got an ACCEPTED")
        _ = try socket.send(WireMessage.cancel(waiting.id).encode())
    }

    @Test("Coordinator.run: one task's final result (retried when an attempt fails); cancelling the caller cancels it")
    func coordinatorRun() async throws {
        try await Self.withOneWorker { coordinator in
            for sector in 1...20 {
                let result = try await coordinator.run(ScanTask.sector(sector))
                #expect(result.status == .completed && result.attempts == 1 && result.system == "worker-a")
                #expect(result.outputText == SectorScanner.expectedOutput(sector: Int64(sector)))
            }
            // Every attempt on the worker fails: the policy re-runs it locally, where it fails again,
            // until the attempts are used up; the one final result says so.
            let failing = try await coordinator.run(ScanTask.sector(99, failEvery: 1))
            #expect(failing.status == .failed && failing.attempts == 3, "\(failing)")
            #expect(failing.error?.contains("UnreliableAPI") == true)
            // A 30 s scan, and the caller gives up after 200 ms: the job is cancelled at the broker and
            // on the worker, and the result comes back cancelled long before the scan would end.
            let clock = ContinuousClock()
            let start = clock.now
            let slow = Task { try await coordinator.run(ScanTask.sector(7, work: .seconds(30))) }
            try await Task.sleep(for: .milliseconds(200))
            slow.cancel()
            let cancelled = try await slow.value
            #expect(cancelled.status == .cancelled, "\(cancelled)")
            #expect(clock.now - start < .seconds(10))
            // The coordinator is free for the next job.
            #expect(try await coordinator.run(ScanTask.sector(3)).status == .completed)
        }
    }

    @Test(
        "Coordinator.runChain: each result starts the next task; what next throws ends it; cancelling ends it after the running task"
    )
    func coordinatorRunChain() async throws {
        struct Stop: Error {}
        try await Self.withOneWorker { coordinator in
            // 20 tasks, each chosen from the last one's output (its sector + 1); the 10th fails on
            // every attempt and ends failed (its 3 attempts used up), and the chain goes on after it.
            var seen: [FinalResult] = []
            var sector = 1
            try await coordinator.runChain(.sector(1)) { result in
                seen.append(result)
                guard result.outputText == SectorScanner.expectedOutput(sector: Int64(sector)) || sector == 10,
                    sector < 20
                else { return nil }
                sector += 1
                return .sector(sector, failEvery: sector == 10 ? 1 : 0)
            }
            #expect(seen.count == 20)
            #expect(seen.filter { $0.status == .completed }.count == 19)
            // One job: its summary counts the whole chain.
            let summary = await coordinator.summary
            #expect(summary.tasks == 20 && summary.completed == 19 && summary.failed == 1, "\(summary)")
            // The same task (the same id) again and again: each time a task of its own.
            let again = ScanTask.sector(4)
            var runs = 0
            try await coordinator.runChain(again) { result in
                #expect(result.status == .completed && result.task.id == again.id)
                runs += 1
                return runs < 5 ? again : nil
            }
            #expect(runs == 5)
            #expect(seen[9].status == .failed && seen[9].attempts == 3, "\(seen[9])")
            for (index, result) in seen.enumerated() where index != 9 {
                #expect(result.outputText == SectorScanner.expectedOutput(sector: Int64(index + 1)))
            }
            // What `next` throws ends the chain, and runChain throws it.
            var calls = 0
            await #expect(throws: Stop.self) {
                try await coordinator.runChain(.sector(1)) { _ in
                    calls += 1
                    if calls == 3 { throw Stop() }
                    return .sector(calls + 1)
                }
            }
            #expect(calls == 3)
            // A next task too large for one message ends the chain with that error, nothing sent.
            var sizes = 0
            do {
                try await coordinator.runChain(.sector(1)) { _ in
                    sizes += 1
                    return sizes == 1
                        ? ScanTask(kind: "sector", input: [UInt8](repeating: 0, count: ScanTask.maxInputBytes + 1))
                        : nil
                }
                Issue.record("a task over the size limit did not end the chain")
            } catch let error as CoordinatorError {
                #expect(error.code == .taskTooLarge, "\(error)")
            }
            #expect(sizes == 1)
            // A chain cannot start while a job runs: one clear error.
            let busy = Task { try await coordinator.run(ScanTask.sector(5, work: .milliseconds(500))) }
            try await Task.sleep(for: .milliseconds(100))
            await #expect(throws: CoordinatorError.self) {
                try await coordinator.runChain(.sector(1)) { _ in nil }
            }
            #expect(try await busy.value.status == .completed)
            // Cancelled while its second task (a 30 s scan) runs: that task's result comes back
            // cancelled, goes to `next`, and the chain ends there although `next` asks for a third.
            let clock = ContinuousClock()
            let start = clock.now
            let chain = Task {
                var statuses: [FinalResult.Status] = []
                try await coordinator.runChain(.sector(1)) { result in
                    statuses.append(result.status)
                    switch statuses.count {
                    case 1: return .sector(7, work: .seconds(30))
                    case 2: return .sector(8)
                    default: return nil
                    }
                }
                return statuses
            }
            try await Task.sleep(for: .milliseconds(300))
            chain.cancel()
            let statuses = try await chain.value
            #expect(statuses == [.completed, .cancelled], "\(statuses)")
            #expect(clock.now - start < .seconds(10))
            // The coordinator is free for the next job.
            #expect(try await coordinator.run(ScanTask.sector(3)).status == .completed)
        }
    }

    @Test("Coordinator.runChain with no broker answering: it throws 'unreachable' at the connect timeout")
    func runChainUnreachable() async throws {
        let context = try ZMQContext()
        let reactor = try Reactor(context: context, name: "test")
        let clock = ContinuousClock()
        let start = clock.now
        // Nothing listens on port 9; the chain would wait forever if its job's end did not reach it.
        let outcome = try await Coordinator.withCoordinator(
            configuration: CoordinatorConfiguration(broker: "tcp://127.0.0.1:9", connectTimeout: .milliseconds(500)),
            reactor: reactor,
            logger: Logger(label: "test"),
            scanners: [SectorScanner()]
        ) { coordinator in
            // Polled, not awaited: a chain that never ends fails this test instead of hanging it.
            final class Outcome: Sendable { let text = Mutex<String?>(nil) }
            let outcome = Outcome()
            Task {
                do {
                    try await coordinator.runChain(.sector(1)) { _ in .sector(2) }
                    outcome.text.withLock { $0 = "returned" }
                } catch let error as CoordinatorError where error.code == .brokerUnreachable {
                    outcome.text.withLock { $0 = "unreachable" }
                } catch {
                    outcome.text.withLock { $0 = "\(error)" }
                }
            }
            while outcome.text.withLock({ $0 }) == nil, clock.now - start < .seconds(10) {
                try await Task.sleep(for: .milliseconds(50))
            }
            return outcome.text.withLock { $0 } ?? "still waiting after 10 s"
        }
        #expect(outcome == "unreachable")
        #expect(clock.now - start < .seconds(5))
        reactor.shutdown()
        context.terminate()
    }

    @Test("Coordinator.runChain with its broker killed midway: that task and every later one run locally, none waits")
    func runChainBrokerLost() async throws {
        // The chain is one job: tasks added after its broker was lost go to the retry policy too
        // (locally re-run), not to the dead broker, where they would wait for good.
        let systems =
            try await Self.withOneWorker(brokerTimeout: .seconds(1)) { coordinator, broker in
                let seen = Seen()
                let chain = Task {
                    var systems: [String] = []
                    try await coordinator.runChain(.sector(1)) { result in
                        systems.append(result.status == .completed ? result.system : "\(result.status)")
                        if systems.count == 3 { broker.signal(SIGKILL) }
                        return systems.count < 10 ? .sector(systems.count + 1) : nil
                    }
                    seen.systems.withLock { $0 = systems }
                    seen.ended.withLock { $0 = true }
                }
                try await Self.waitUntil { seen.ended.withLock { $0 } }
                chain.cancel()
                return seen.ended.withLock { $0 } ? seen.systems.withLock { $0 } : nil
            } ?? nil
        #expect(systems?.prefix(3).allSatisfy { $0 == "worker-a" } == true, "\(String(describing: systems))")
        #expect(
            systems.map { Array($0.dropFirst(3)) } == Array(repeating: "local", count: 7),
            "\(String(describing: systems))"
        )
    }

    @Test("an open job (submit with moreToCome) whose broker was killed: tasks added later run locally, none waits")
    func openJobBrokerLost() async throws {
        // `skynet submit --exec … --inputs -` adds its tasks so, as their lines are read.
        let systems =
            try await Self.withOneWorker(brokerTimeout: .seconds(1)) { coordinator, broker in
                let seen = Seen()
                let stream = try await coordinator.submit([.sector(1)], moreToCome: true)
                let reader = Task {
                    for try await batch in stream {
                        for event in batch {
                            if case .final(let result) = event { seen.systems.withLock { $0.append(result.system) } }
                            if case .brokerLost = event { seen.lost.withLock { $0 = true } }
                        }
                    }
                    seen.ended.withLock { $0 = true }
                }
                try await Self.waitUntil { seen.systems.withLock { $0.count } == 1 }
                broker.signal(SIGKILL)
                try await Self.waitUntil { seen.lost.withLock { $0 } }
                // Added after the loss: to the retry policy at once (locally re-run), not to the dead broker.
                try await coordinator.add([.sector(2), .sector(3)])
                await coordinator.endOfTasks()
                try await Self.waitUntil { seen.ended.withLock { $0 } }
                reader.cancel()
                return seen.ended.withLock { $0 } ? seen.systems.withLock { $0 } : nil
            } ?? nil
        #expect(systems == ["worker-a", "local", "local"], "\(String(describing: systems))")
    }

    /// A broker and one worker as processes, a coordinator on a reactor of this process connected to
    /// them, `body` with the coordinator; then all of it stopped (an error `body` throws is recorded).
    private static func withOneWorker(_ body: @Sendable (Coordinator) async throws -> Void) async throws {
        _ = try await Self.withOneWorker { coordinator, _ in try await body(coordinator) }
    }

    /// ``withOneWorker(_:)`` whose `body` also gets the broker's process, and returns what it returns
    /// (nil when it threw). With `brokerTimeout`, the coordinator heartbeats every 200 ms and takes
    /// the broker for lost after that much silence (at least the heartbeats' expiry).
    private static func withOneWorker<Result: Sendable>(
        brokerTimeout: Duration? = nil,
        _ body: @Sendable (Coordinator, Spawned) async throws -> Result
    ) async throws -> Result? {
        let cluster = try await Cluster(workers: 1)
        let context = try ZMQContext()
        let reactor = try Reactor(context: context, name: "test")
        let broker = cluster.broker
        var configuration = CoordinatorConfiguration(broker: cluster.frontend)
        if let brokerTimeout {
            configuration.heartbeat = Heartbeat(interval: .milliseconds(200))
            configuration.brokerTimeout = brokerTimeout
        }
        var result: Result?
        do {
            result = try await Coordinator.withCoordinator(
                configuration: configuration,
                reactor: reactor,
                logger: Logger(label: "test"),
                scanners: [SectorScanner()]
            ) { coordinator in try await body(coordinator, broker) }
        } catch {
            Issue.record(error)
        }
        reactor.shutdown()
        context.terminate()
        await cluster.shutdown()
        return result
    }

    /// What a test's task saw, read by the test as it polls.
    private final class Seen: Sendable {
        let systems = Mutex<[String]>([])
        let lost = Mutex(false)
        let ended = Mutex(false)
    }

    /// Polls `done` every 50 ms for up to 20 s: a test that waits this way fails rather than hangs
    /// when what it waits for never comes.
    private static func waitUntil(_ done: () -> Bool) async throws {
        let clock = ContinuousClock()
        let start = clock.now
        while !done(), clock.now - start < .seconds(20) { try await Task.sleep(for: .milliseconds(50)) }
    }

    @Test("a coordinator that cannot reach a broker says so within 5 s and exits non-zero")
    func unreachableBroker() async throws {
        let submit = try Spawned(["submit", "--broker", "tcp://127.0.0.1:9", "--sectors", "3"], name: "unreachable")
        // It gives up after its 5 s connect timeout (the message below says so); 15 s only bounds a hang.
        let status = await submit.waitForExit(timeout: .seconds(15))
        #expect(status != nil && status != 0)
        #expect(submit.stderr.contains("no answer from the broker at tcp://127.0.0.1:9 within 5s"))
        #expect(submit.stderr.split(separator: "\n").count <= 2, "a short error, not a trace: \(submit.stderr)")
    }

    @Test("bad flags and malformed task files give a one-line error and exit 255 (could not run at all)")
    func badInput() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-bad-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("tasks.jsonl")
        try "{\"sector\": 1}\n{\"sector\": \"two\"}\n".write(to: file, atomically: true, encoding: .utf8)
        let cases: [([String], String)] = [
            (["submit", "--tasks", file.path], "line 2: \"sector\" must be an integer"),
            (["submit", "--tasks", "/nonexistent/tasks.jsonl"], "cannot read task file"),
            (["submit"], "give --sectors N, --tasks FILE.jsonl, or --exec"),
            (["submit", "--exec", "gzip {}"], "--exec needs --inputs"),
            (["submit", "--exec", "gzip '{}", "--inputs", "-"], "quote is not closed"),
            (["submit", "--exec", "gzip {}", "--inputs", "/nonexistent/lines"], "cannot read --inputs"),
            (["submit", "--sectors", "3", "--env", "SKYNET_SURELY_UNSET_VARIABLE"], "no such variable"),
            (["submit", "--sectors", "3", "--cache", "/proc/no/such/dir"], "cache"),
            (["submit", "--sectors", "3", "--results", ""], "--results needs a directory"),
            (["submit", "--sectors", "3", "--joblog", ""], "--joblog needs a file"),
            (["submit", "--sectors", "3", "--cache", ""], "--cache needs a directory"),
            (["worker", "--allow-command", "/nonexistent/prog", "--insecure"], "no executable file there"),
            (["submit", "--sectors", "0"], "--sectors must be"),
            (["submit", "--sectors", "3", "--work", "soon"], "soon"),
            (["submit", "--sectors", "3", "--broker", "localhost:5555"], "not an endpoint"),
            (["submit", "--sectors", "3", "--retry", "sometimes"], "sometimes"),
            (["worker", "--slots", "0"], "--slots must be"),
            // No worker to run them: the bench's tasks would wait at the broker for good.
            (["bench", "latency", "--workers", "0"], "--workers must be 1 to 500"),
            (["bench", "throughput", "--workers", "0"], "--workers must be 1 to 500"),
            (["bench", "latency", "--client", ""], "--client"),
            (["worker", "--prefetch", "2000"], "--prefetch must be 0 to 1024"),
            (["worker", "--discover", "--broker", "tcp://127.0.0.1:5556"], "leave out --broker"),
            (["submit", "--sectors", "3", "--discover", "--discover-wait", "0s"], "--discover-wait must be"),
            (["submit", "--sectors", "3", "--discover-port", "0"], "--discover-port must be 1 to 65535"),
            (["broker", "--announce", "--announce-port", "70000"], "--announce-port must be 1 to 65535"),
            (["broker", "--frontend", "tcp://127.0.0.1"], "needs a host and a port"),
            (["broker", "--heartbeat", "2m"], "--heartbeat must be at most 60s"),
            (["worker", "--heartbeat", "2m"], "--heartbeat must be at most 60s"),
            (["broker", "--etcd", "http://127.0.0.1:2379", "--advertise", ""], "--advertise needs a host"),
            (["broker", "--etcd", "http://127.0.0.1:2379", "--journal", "/tmp/j"], "choose one"),
            (["broker", "--etcd", "http://127.0.0.1:2379", "--frontend", "tcp://127.0.0.1:*"], "a fixed port"),
            (["broker", "--etcd", "http://127.0.0.1:2379", "--etcd-ca", "/nonexistent/ca"], "--etcd-ca"),
            // A mistyped flag is named, even where the check it makes fail would run first.
            (["submit", "--brokr", "tcp://127.0.0.1:5555"], "Unknown option '--brokr'. Did you mean '--broker'?"),
            (["worker", "--slots", "0", "--prefech", "2"], "Unknown option '--prefech'"),
            (["broker", "--heartbeat", "2m", "--curve-secrt", "k"], "Unknown option '--curve-secrt'"),
            (["submit", "--sectors", "3", "--idle-spin", "1s", "--jsn"], "Unknown option '--jsn'"),
        ]
        for (arguments, message) in cases {
            let process = try Spawned(arguments, name: "bad")
            let status = await process.waitForExit(timeout: .seconds(10))
            #expect(status == 255, "\(arguments) exited \(String(describing: status))")
            #expect(process.stderr.contains(message), "\(arguments): \(process.stderr)")
        }
        // A port in use is a clear error too.
        let cluster = try await Cluster(workers: 0)
        let clash = try Spawned(
            ["broker", "--frontend", cluster.frontend, "--backend", "tcp://127.0.0.1:*"],
            name: "clash"
        )
        #expect(await clash.waitForExit(timeout: .seconds(10)) == 255, "could not run at all")
        #expect(clash.stderr.contains("Address already in use"), "\(clash.stderr)")
        await cluster.shutdown()
    }

    @Test("skynet demo runs a broker, workers and a coordinator in one process")
    func demo() async throws {
        let demo = try Spawned(["demo", "--sectors", "12", "--work", "20ms", "--fail-every", "5"], name: "demo")
        let status = await demo.waitForExit(timeout: .seconds(30))
        #expect(status == 0, "demo: \(demo.stderr)")
        let out = demo.stdout
        #expect(Cluster.count("Completed: ", in: out) == 12)
        #expect(out.contains("by local"), "failures re-run locally: \(out)")
        #expect(out.contains("Retrying: "))
        #expect(out.contains("Summary: 12 tasks, 12 completed, 0 failed"))
    }
}
