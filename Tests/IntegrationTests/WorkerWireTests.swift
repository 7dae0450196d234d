import Foundation
import Logging
import Testing
import ZeroMQ

@testable import SkyNet
@testable import SkyNetCore

/// A scanner whose scans wait until cancelled (no timer: a test controls when they end).
private struct UntilCancelled: SkyNet.TaskScanner {
    static let kind = "until-cancelled"
    func scan(_ input: [UInt8]) async throws -> [UInt8] {
        while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
        throw CancellationError()
    }
}

/// A scanner that never blocks, so a worker runs it in a slot loop on its reactor: input `[0]` waits
/// until cancelled, `[n]` sleeps n ms. The output is the id of the task `ScanContext` says it scans.
private struct OnReactor: SkyNet.TaskScanner {
    static let kind = "on-reactor"
    func neverBlocks(_ input: [UInt8]) -> Bool { true }
    func scan(_ input: [UInt8]) async throws -> [UInt8] {
        guard ScanContext.reactor != nil else { throw ScannerError("not on the reactor") }
        if input.first == 0 {
            while true { try await ScanContext.sleep(for: .milliseconds(5)) }
        }
        try await ScanContext.sleep(for: .milliseconds(Int(input.first ?? 1)))
        return Array("\(ScanContext.task?.id.description ?? "none")".utf8)
    }
}

/// The broker's side of the wire for one real worker: a ROUTER the worker connects to, what the
/// worker sent so far (BATCHes unpacked), and its routing id once it has spoken.
private final class BrokerSide {
    let router: Socket
    var messages: [WireMessage] = []
    var peer: [UInt8] = []

    init(_ router: Socket) { self.router = router }

    /// Reads what the worker sends into ``messages`` until `done` holds; fails after 10 s.
    func receive(until done: ([WireMessage]) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !done(self.messages) {
            guard let message = try self.router.receive() else {
                guard ContinuousClock.now < deadline else { throw TestFailure("no answer: \(self.messages)") }
                try await Task.sleep(for: .milliseconds(2))
                continue
            }
            self.peer = message.bytes(of: 0)
            let decoded = try WireMessage.decode(message, from: 1)
            if case .batch(let inner) = decoded {
                self.messages += try inner.map { try WireMessage.decode($0) }
            } else {
                self.messages.append(decoded)
            }
        }
    }

    /// Sends `message` to the worker (once it has spoken).
    func send(_ message: WireMessage) throws { _ = try self.router.send([self.peer] + message.encode()) }

    /// The RESULTs among `messages`: id, status and body.
    static func results(_ messages: [WireMessage]) -> [(TaskID, ResultStatus, [UInt8])] {
        messages.compactMap {
            if case .result(let id, _, let status, _, let body) = $0 { (id, status, body) } else { nil }
        }
    }
}

/// Runs `body` with a real worker (`configuration`'s broker set to a ROUTER of this test) that has
/// said READY, and the broker's side of its wire. The worker is stopped, and closes its socket before
/// the reactor's context ends, whatever `body` does.
private func withWorkerOnWire(
    _ name: String,
    slots: Int,
    prefetch: Int = 0,
    scanners: [any SkyNet.TaskScanner],
    _ body: (Worker, BrokerSide) async throws -> Void
) async throws {
    try await withReactor(name: name) { reactor in
        let router = try Socket(reactor.context, type: .router)
        // Closed before the reactor's context ends (terminating a context waits for its sockets).
        defer { router.close() }
        try router.set(.linger(milliseconds: 0))
        try router.bind("tcp://127.0.0.1:*")
        let worker = Worker(
            configuration: WorkerConfiguration(
                broker: try router.lastEndpoint(),
                name: name,
                slots: slots,
                prefetch: prefetch
            ),
            reactor: reactor,
            logger: Logger(label: "test"),
            scanners: scanners
        )
        let running = Task { try await worker.run() }
        let side = BrokerSide(router)
        do {
            try await side.receive { $0.contains { if case .ready = $0 { true } else { false } } }
            try await body(worker, side)
        } catch {
            running.cancel()
            _ = try? await running.value
            throw error
        }
        running.cancel()
        _ = try? await running.value
    }
}

extension EndToEndTests {
    @Test("a worker sent a task again while its cancelled run still finishes keeps the new run cancellable")
    func workerOverlappingRuns() async throws {
        try await withWorkerOnWire("worker-wire", slots: 2, scanners: [UntilCancelled()]) { _, side in
            let id = TaskID.random()
            let task = WireMessage.task(id, attempt: 1, TaskEnvelope(kind: "until-cancelled"), input: [])
            // The first run is cancelled, and the same task arrives again before that run has answered.
            try side.send(task)
            try side.send(.cancel(id))
            try side.send(task)
            side.messages.removeAll()
            try await side.receive { BrokerSide.results($0).count == 1 }
            #expect(BrokerSide.results(side.messages).map(\.1) == [.cancelled])
            // The second run is still the worker's: a CANCEL reaches it (before, the first run's
            // result had removed it, and this CANCEL went nowhere).
            try side.send(.cancel(id))
            side.messages.removeAll()
            try await side.receive { BrokerSide.results($0).count == 1 }
            #expect(BrokerSide.results(side.messages).map(\.1) == [.cancelled])
        }
    }

    @Test("a worker with prefetch offers its slots plus the held tasks as credit, and runs only its slots at once")
    func workerPrefetch() async throws {
        try await withWorkerOnWire("worker-prefetch", slots: 1, prefetch: 2, scanners: [UntilCancelled()]) {
            worker,
            side in
            let capacity = side.messages.compactMap { if case .ready(let capacity, _) = $0 { capacity } else { nil } }
                .first
            #expect(capacity == 3)
            let ids = (0..<3).map { _ in TaskID.random() }
            for id in ids {
                try side.send(.task(id, attempt: 1, TaskEnvelope(kind: "until-cancelled"), input: []))
            }
            // All three are held, one runs: the others wait for its slot.
            let deadline = ContinuousClock.now + .seconds(10)
            while await worker.system.count < 3, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(await worker.system.count == 3)
            #expect(await worker.system.running == 1)
            for id in ids { try side.send(.cancel(id)) }
            func cancelled(_ messages: [WireMessage]) -> [TaskID] {
                BrokerSide.results(messages).filter { $0.1 == .cancelled }.map(\.0)
            }
            try await side.receive { cancelled($0).count == 3 }
            #expect(Set(cancelled(side.messages)) == Set(ids))
            #expect(await worker.system.peakRunning == 1)
        }
    }

    @Test("slot loops: a cancel reaches only its own scan; the next scan runs in a new loop, with its own context")
    func workerSlotLoops() async throws {
        try await withWorkerOnWire("worker-loops", slots: 1, prefetch: 2, scanners: [OnReactor()]) { worker, side in
            side.messages.removeAll()
            // One slot: a runs (until cancelled), b and c wait for its loop.
            let (a, b, c) = (TaskID.random(), TaskID.random(), TaskID.random())
            let envelope = TaskEnvelope(kind: OnReactor.kind)
            try side.send(.task(a, attempt: 1, envelope, input: [0]))
            try side.send(.task(b, attempt: 1, envelope, input: [20]))
            try side.send(.task(c, attempt: 1, envelope, input: [0]))
            let deadline = ContinuousClock.now + .seconds(10)
            while await worker.system.running < 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            // c is cancelled while it waits: it ends at once and never runs.
            try side.send(.cancel(c))
            try await side.receive { BrokerSide.results($0).count == 1 }
            #expect(BrokerSide.results(side.messages).map(\.0) == [c])
            #expect(BrokerSide.results(side.messages).map(\.1) == [.cancelled])
            // a's cancel ends a, and only a: b runs after it (in the loop that takes a's place) and
            // completes, and its scan sees b as its task.
            try side.send(.cancel(a))
            try await side.receive { BrokerSide.results($0).count == 3 }
            let ended = BrokerSide.results(side.messages)
            #expect(ended.map(\.0) == [c, a, b])
            #expect(ended.map(\.1) == [.cancelled, .cancelled, .completed])
            #expect(ended.last?.2 == Array(b.description.utf8))
            #expect(await worker.system.peakRunning == 1)
            // The loop that ran b parks, and takes the next scan.
            let d = TaskID.random()
            try side.send(.task(d, attempt: 1, envelope, input: [1]))
            try await side.receive { BrokerSide.results($0).count == 4 }
            #expect(BrokerSide.results(side.messages).last?.0 == d)
            #expect(BrokerSide.results(side.messages).last?.1 == .completed)
        }
    }
}
