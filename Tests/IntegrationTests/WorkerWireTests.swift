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

/// Reads what a worker sends to `router` into `messages` (BATCHes unpacked) until `done` holds,
/// noting the worker's routing id in `peer`; fails after 10 s.
private func receiveFromWorker(
    _ router: Socket,
    into messages: inout [WireMessage],
    peer: inout [UInt8],
    until done: ([WireMessage]) -> Bool
) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !done(messages) {
        guard let message = try router.receive() else {
            guard ContinuousClock.now < deadline else { throw TestFailure("no answer: \(messages)") }
            try await Task.sleep(for: .milliseconds(2))
            continue
        }
        peer = message.bytes(of: 0)
        let decoded = try WireMessage.decode(message, from: 1)
        if case .batch(let inner) = decoded {
            messages += try inner.map { try WireMessage.decode($0) }
        } else {
            messages.append(decoded)
        }
    }
}

extension EndToEndTests {
    @Test("a worker sent a task again while its cancelled run still finishes keeps the new run cancellable")
    func workerOverlappingRuns() async throws {
        try await withReactor(name: "worker-wire") { reactor in
            let router = try Socket(reactor.context, type: .router)
            // Closed before the reactor's context ends (terminating a context waits for its sockets).
            defer { router.close() }
            try router.set(.linger(milliseconds: 0))
            try router.bind("tcp://127.0.0.1:*")
            let endpoint = try router.lastEndpoint()
            let worker = Worker(
                configuration: WorkerConfiguration(broker: endpoint, name: "wire", slots: 2),
                reactor: reactor,
                logger: Logger(label: "test"),
                scanners: [UntilCancelled()]
            )
            let running = Task { try await worker.run() }
            do {
                /// Messages from the worker (BATCHes unpacked) until `done`; fails after 10 s.
                var peer: [UInt8] = []
                func receive(until done: ([WireMessage]) -> Bool) async throws -> [WireMessage] {
                    var messages: [WireMessage] = []
                    try await receiveFromWorker(router, into: &messages, peer: &peer, until: done)
                    return messages
                }
                func send(_ message: WireMessage) throws { _ = try router.send([peer] + message.encode()) }
                func results(_ messages: [WireMessage]) -> [ResultStatus] {
                    messages.compactMap { if case .result(_, _, let status, _, _) = $0 { status } else { nil } }
                }
                _ = try await receive { $0.contains { if case .ready = $0 { true } else { false } } }
                let id = TaskID.random()
                let task = WireMessage.task(id, attempt: 1, TaskEnvelope(kind: "until-cancelled"), input: [])
                // The first run is cancelled, and the same task arrives again before that run has answered.
                try send(task)
                try send(.cancel(id))
                try send(task)
                let first = try await receive { results($0).count == 1 }
                #expect(results(first) == [.cancelled])
                // The second run is still the worker's: a CANCEL reaches it (before, the first run's
                // result had removed it, and this CANCEL went nowhere).
                try send(.cancel(id))
                let second = try await receive { results($0).count == 1 }
                #expect(results(second) == [.cancelled])
            } catch {
                running.cancel()
                _ = try? await running.value
                throw error
            }
            // The worker closes its socket before the reactor's context ends.
            running.cancel()
            _ = try? await running.value
        }
    }

    @Test("a worker with prefetch offers its slots plus the held tasks as credit, and runs only its slots at once")
    func workerPrefetch() async throws {
        try await withReactor(name: "worker-prefetch") { reactor in
            let router = try Socket(reactor.context, type: .router)
            defer { router.close() }
            try router.set(.linger(milliseconds: 0))
            try router.bind("tcp://127.0.0.1:*")
            let endpoint = try router.lastEndpoint()
            let worker = Worker(
                configuration: WorkerConfiguration(broker: endpoint, name: "prefetch", slots: 1, prefetch: 2),
                reactor: reactor,
                logger: Logger(label: "test"),
                scanners: [UntilCancelled()]
            )
            let running = Task { try await worker.run() }
            var peer: [UInt8] = []
            var messages: [WireMessage] = []
            func receive(until done: ([WireMessage]) -> Bool) async throws {
                try await receiveFromWorker(router, into: &messages, peer: &peer, until: done)
            }
            do {
                try await receive { $0.contains { if case .ready = $0 { true } else { false } } }
                let capacity = messages.compactMap { if case .ready(let capacity, _) = $0 { capacity } else { nil } }
                    .first
                #expect(capacity == 3)
                let ids = (0..<3).map { _ in TaskID.random() }
                for id in ids {
                    _ = try router.send(
                        [peer]
                            + WireMessage.task(id, attempt: 1, TaskEnvelope(kind: "until-cancelled"), input: [])
                            .encode()
                    )
                }
                // All three are held, one runs: the others wait for its slot.
                let deadline = ContinuousClock.now + .seconds(10)
                while await worker.system.count < 3, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(await worker.system.count == 3)
                #expect(await worker.system.running == 1)
                for id in ids { _ = try router.send([peer] + WireMessage.cancel(id).encode()) }
                func cancelled(_ messages: [WireMessage]) -> [TaskID] {
                    messages.compactMap { if case .result(let id, _, .cancelled, _, _) = $0 { id } else { nil } }
                }
                try await receive { cancelled($0).count == 3 }
                #expect(Set(cancelled(messages)) == Set(ids))
                #expect(await worker.system.peakRunning == 1)
            } catch {
                running.cancel()
                _ = try? await running.value
                throw error
            }
            // The worker closes its socket before the reactor's context ends.
            running.cancel()
            _ = try? await running.value
        }
    }

    @Test("slot loops: a cancel reaches only its own scan; the next scan runs in a new loop, with its own context")
    func workerSlotLoops() async throws {
        try await withReactor(name: "worker-loops") { reactor in
            let router = try Socket(reactor.context, type: .router)
            defer { router.close() }
            try router.set(.linger(milliseconds: 0))
            try router.bind("tcp://127.0.0.1:*")
            let endpoint = try router.lastEndpoint()
            let worker = Worker(
                configuration: WorkerConfiguration(broker: endpoint, name: "loops", slots: 1, prefetch: 2),
                reactor: reactor,
                logger: Logger(label: "test"),
                scanners: [OnReactor()]
            )
            let running = Task { try await worker.run() }
            var peer: [UInt8] = []
            var messages: [WireMessage] = []
            func receive(until done: ([WireMessage]) -> Bool) async throws {
                try await receiveFromWorker(router, into: &messages, peer: &peer, until: done)
            }
            func send(_ message: WireMessage) throws { _ = try router.send([peer] + message.encode()) }
            func results(_ messages: [WireMessage]) -> [(TaskID, ResultStatus, [UInt8])] {
                messages.compactMap {
                    if case .result(let id, _, let status, _, let body) = $0 { (id, status, body) } else { nil }
                }
            }
            do {
                try await receive { $0.contains { if case .ready = $0 { true } else { false } } }
                // One slot: a runs (until cancelled), b and c wait for its loop.
                let (a, b, c) = (TaskID.random(), TaskID.random(), TaskID.random())
                let envelope = TaskEnvelope(kind: OnReactor.kind)
                try send(.task(a, attempt: 1, envelope, input: [0]))
                try send(.task(b, attempt: 1, envelope, input: [20]))
                try send(.task(c, attempt: 1, envelope, input: [0]))
                let deadline = ContinuousClock.now + .seconds(10)
                while await worker.system.running < 1, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                // c is cancelled while it waits: it ends at once and never runs.
                try send(.cancel(c))
                try await receive { results($0).count == 1 }
                #expect(results(messages).map(\.0) == [c] && results(messages).map(\.1) == [.cancelled])
                // a's cancel ends a, and only a: b runs after it (in the loop that takes a's place) and
                // completes, and its scan sees b as its task.
                try send(.cancel(a))
                try await receive { results($0).count == 3 }
                let ended = results(messages)
                #expect(ended.map(\.0) == [c, a, b])
                #expect(ended.map(\.1) == [.cancelled, .cancelled, .completed])
                #expect(ended.last?.2 == Array(b.description.utf8))
                #expect(await worker.system.peakRunning == 1)
                // The loop that ran b parks, and takes the next scan.
                let d = TaskID.random()
                try send(.task(d, attempt: 1, envelope, input: [1]))
                try await receive { results($0).count == 4 }
                #expect(results(messages).last?.0 == d && results(messages).last?.1 == .completed)
            } catch {
                running.cancel()
                _ = try? await running.value
                throw error
            }
            running.cancel()
            _ = try? await running.value
        }
    }
}
