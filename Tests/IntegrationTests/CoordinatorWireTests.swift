import Foundation
import Logging
import Testing
import ZeroMQ

@testable import SkyNet
@testable import SkyNetCore

extension EndToEndTests {
    /// A coordinator reads a RESULT and an ACCEPTED in place
    /// (``DealerConnection/receiveMessages(results:accepted:_:)``): the broker's side of its wire here
    /// is a ROUTER of the test, which answers with RESULTs and ACCEPTEDs it could not have sent (bad,
    /// alone, in a BATCH, from two systems, twice).
    @Test(
        "a coordinator reads RESULTs and ACCEPTEDs in place: bad ones dropped, good ones alone or in a BATCH, a second one a duplicate"
    )
    func coordinatorResultsInPlace() async throws {
        try await withReactor(name: "coordinator-wire") { reactor in
            let router = try Socket(reactor.context, type: .router)
            defer { router.close() }
            try router.set(.linger(milliseconds: 0))
            try router.bind("tcp://127.0.0.1:*")
            let coordinator = Coordinator(
                configuration: CoordinatorConfiguration(broker: try router.lastEndpoint(), retry: .none()),
                reactor: reactor,
                logger: Logger(label: "test"),
                scanners: []
            )
            try await coordinator.connect()
            let first = ScanTask(id: TaskID.random(), kind: "sector", input: [1])
            let second = ScanTask(id: TaskID.random(), kind: "sector", input: [2])
            let events = try await coordinator.submit([first, second])

            // The coordinator's routing id and its two SUBMITs (alone or in a BATCH).
            var peer: [UInt8] = []
            var submitted: Set<TaskID> = []
            var listReader = 0
            let deadline = ContinuousClock.now + .seconds(10)
            while submitted.count < 2 {
                guard let message = try router.receive() else {
                    #expect(ContinuousClock.now < deadline, "no SUBMITs came")
                    if ContinuousClock.now >= deadline { return }
                    try await Task.sleep(for: .milliseconds(2))
                    continue
                }
                peer = message.bytes(of: 0)
                let decoded = try WireMessage.decode(message, from: 1)
                let inner =
                    if case .batch(let packed) = decoded { try packed.map { try WireMessage.decode($0) } } else {
                        [decoded]
                    }
                for case .submit(let id, _, _, _) in inner { submitted.insert(id) }
                // Its SUBMITs say it reads ACCEPTED lists.
                try message.withFrames(from: 1) { frames throws(ProtocolError) in
                    guard frames.count == 2 else { return }
                    try Batch.forEach(frames[1], count: UInt32(inner.count)) { message in
                        if Header.flags(of: message.frame(0)) & Header.readsAcceptedListsFlag != 0 { listReader += 1 }
                    }
                }
            }
            #expect(listReader == 2, "SUBMITs that say their sender reads ACCEPTED lists")
            func send(_ frames: [[UInt8]]) throws { _ = try router.send([peer] + frames) }
            func result(_ id: TaskID, _ system: String, _ body: String) -> [[UInt8]] {
                let meta = ResultMeta(system: system, durationMicroseconds: 5, slot: 0, busy: 1)
                return WireMessage.result(id, attempt: 1, .completed, meta, body: Array(body.utf8)).encode()
            }
            try send(WireMessage.heartbeat(epoch: 7, intervalMilliseconds: 1000).encode())
            // ACCEPTEDs, read in place too: a bad one (a second frame) dropped; the first task's alone;
            // in a BATCH a list of the second's and the first's again (counted once), a bad list (a
            // task without an id) dropped whole, and the second's requeued.
            let accepted = { (id: TaskID) in WireMessage.accepted(id, attempt: 1, requeued: false).encode() }
            try send(WireMessage.accepted(second.id, attempt: 3, requeued: true).encode() + [[0]])
            try send(accepted(first.id))
            let list = [AcceptedTask(second.id, attempt: 1), AcceptedTask(first.id, attempt: 1)]
            var badList = WireMessage.acceptedList(list).encode()
            badList[1] = [UInt8](repeating: 0, count: AcceptedTask.size)
            try send(
                WireMessage.batch([
                    WireMessage.acceptedList(list).encode(), badList,
                    WireMessage.accepted(second.id, attempt: 2, requeued: true).encode(),
                ]).encode()
            )
            // Bad RESULTs: a meta cut short (alone), an unknown status (in a BATCH, before a good one).
            let header = Header(.result, arg: ResultStatus.completed.rawValue, attempt: 1, taskID: first.id).encode()
            try send([header, [5, 0, 0x77], []])
            let unknownStatus = Header(.result, arg: 99, attempt: 1, taskID: first.id).encode()
            try send(
                WireMessage.batch([
                    [unknownStatus, ResultMeta(system: "w", durationMicroseconds: 0, slot: 0, busy: 0).encode(), []],
                    result(first.id, "worker-a-with-a-long-name", "one"),
                ]).encode()
            )
            // The first's again (a duplicate, its output not taken), then the second task's from
            // another system, alone.
            try send(result(first.id, "worker-a-with-a-long-name", "again"))
            try send(result(second.id, "worker-b", "two"))

            var finals: [TaskID: FinalResult] = [:]
            var acceptedCount = 0
            var requeued: [(TaskID, UInt32)] = []
            for try await batch in events {
                for event in batch {
                    switch event {
                    case .final(let final): finals[final.task.id] = final
                    case .accepted(let count): acceptedCount += count
                    case .requeued(let task, let attempt): requeued.append((task.id, attempt))
                    default: break
                    }
                }
            }
            #expect(acceptedCount == 2)
            #expect(requeued.count == 1 && requeued.first?.0 == second.id && requeued.first?.1 == 2)
            #expect(finals[first.id]?.output == Array("one".utf8))
            #expect(finals[first.id]?.system == "worker-a-with-a-long-name")
            #expect(finals[second.id]?.output == Array("two".utf8))
            #expect(finals[second.id]?.system == "worker-b")
            #expect(finals.values.allSatisfy { $0.status == .completed && $0.attempts == 1 })
            let summary = await coordinator.summary
            #expect(summary.completed == 2 && summary.duplicates == 1 && summary.requeued == 1, "\(summary)")
            await coordinator.close()
        }
    }
}
