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
}
