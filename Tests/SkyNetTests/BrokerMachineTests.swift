import Logging
import Synchronization
import Testing

@testable import SkyNet
@testable import SkyNetCore

/// The broker's policy, through the entry points the actor calls (``BrokerMachine``): what used to
/// live in the actor and was neither unit-tested nor fuzzed.
@Suite("Broker machine: holds, limits, the stop gate, durable promises, detached jobs")
struct BrokerMachineTests {
    let t0 = ContinuousClock.now
    let coordinator = PeerID(Array("c-1".utf8))
    let workerA = PeerID(Array("w-a".utf8))
    let workerB = PeerID(Array("w-b".utf8))
    let envelope = TaskEnvelope(kind: "sector", priority: 0, maxAttempts: 3)

    func machine(
        durable: Bool = false,
        maxWorkers: Int = 10,
        maxCoordinators: Int = 10,
        heartbeat: Duration = .seconds(1)
    ) -> BrokerMachine {
        BrokerMachine(
            rules: BrokerRules(
                heartbeat: Heartbeat(interval: heartbeat),
                maxWorkers: maxWorkers,
                maxCoordinators: maxCoordinators,
                durable: durable
            ),
            epoch: 7,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        )
    }

    func effects(_ machine: inout BrokerMachine) -> [BrokerMachine.Effect] {
        var effects: [BrokerMachine.Effect] = []
        machine.takeEffects { effects.append($0) }
        return effects
    }

    func ready(
        _ machine: inout BrokerMachine,
        _ worker: PeerID,
        slots: UInt32 = 4,
        at now: ContinuousClock.Instant? = nil
    ) {
        let info = ReadyInfo(name: "\(worker)", kinds: ["sector"], heartbeatMilliseconds: 1000, version: "test")
        _ = machine.worker(worker, .ready(capacity: slots, info), frames: [], now: now ?? self.t0)
    }

    func submit(
        _ machine: inout BrokerMachine,
        _ id: TaskID,
        from peer: PeerID? = nil,
        at now: ContinuousClock.Instant? = nil
    ) {
        machine.coordinator(
            peer ?? self.coordinator,
            .submit(id, attempt: 1, self.envelope, input: [1]),
            key: nil,
            now: now ?? self.t0
        )
    }

    func result(_ id: TaskID, attempt: UInt32 = 1, _ status: ResultStatus = .completed) -> WireMessage {
        .result(
            id,
            attempt: attempt,
            status,
            ResultMeta(system: "w", durationMicroseconds: 5, slot: 0, busy: 1),
            body: [9]
        )
    }

    @Test("READY is answered with a HEARTBEAT carrying the broker's epoch and interval")
    func readyAnswered() {
        var machine = self.machine(heartbeat: .milliseconds(250))
        self.ready(&machine, self.workerA)
        #expect(self.effects(&machine) == [.toWorker(self.workerA, .heartbeat(epoch: 7, intervalMilliseconds: 250))])
    }

    @Test("a first ACCEPTED is held, and dropped when its RESULT goes first; the timer sends the others")
    func acceptedHold() {
        var machine = self.machine()
        self.ready(&machine, self.workerA, slots: 1)
        _ = self.effects(&machine)
        let first = TaskID.random()
        let second = TaskID.random()
        self.submit(&machine, first)
        #expect(self.effects(&machine) == [.task(worker: self.workerA, first)])
        let holds = machine.holdsAccepted
        #expect(holds, "its ACCEPTED held: the broker arms the hold's timer")
        // The RESULT goes before the hold's time is up: no ACCEPTED at all, and no timer.
        let forward = machine.worker(self.workerA, self.result(first), frames: [], now: self.t0)
        #expect(forward == self.coordinator)
        let released = !machine.holdsAccepted
        #expect(self.effects(&machine).isEmpty && released)
        self.submit(&machine, second)
        self.submit(&machine, TaskID.random())
        _ = self.effects(&machine)
        machine.acceptedHoldExpired()
        var accepted: [BrokerMachine.HeldAccepted] = []
        for case .accepted(let held, _) in self.effects(&machine) { accepted += held }
        #expect(accepted.count == 2)
        #expect(accepted.allSatisfy { $0.coordinator == self.coordinator && $0.attempt == 1 })
        let done = !machine.holdsAccepted
        #expect(done, "all sent: the timer is not needed")
    }

    @Test(
        "held ACCEPTEDs go as lists of at most 512 to a coordinator whose SUBMITs say it reads them, one each to another"
    )
    func acceptedLists() {
        var machine = self.machine()
        let reader = PeerID(Array("c-lists".utf8))
        let listed = (0..<600).map { _ in TaskID.random() }
        for id in listed {
            machine.coordinatorSubmit(
                reader,
                id,
                attempt: 1,
                self.envelope,
                input: TaskBytes([]),
                readsAcceptedLists: true,
                now: self.t0
            )
        }
        let single = (0..<3).map { _ in TaskID.random() }
        for id in single { self.submit(&machine, id) }
        _ = self.effects(&machine)
        machine.acceptedHoldExpired()
        let runs = self.effects(&machine).compactMap { effect -> ([BrokerMachine.HeldAccepted], Bool)? in
            if case .accepted(let held, let list) = effect { (held, list) } else { nil }
        }
        #expect(runs.map(\.0.count) == [512, 88, 3])
        #expect(runs.map(\.1) == [true, true, false])
        #expect(runs.prefix(2).flatMap { $0.0.map(\.id) } == listed)
        #expect(runs.prefix(2).allSatisfy { $0.0.allSatisfy { $0.coordinator == reader } })
        #expect(runs.last?.0.map(\.id) == single)
    }

    @Test("a coordinator with 64 tasks here gets its messages at most once a millisecond; one with few, at once")
    func bulkHold() {
        var machine = self.machine()
        for _ in 0..<BrokerMachine.bulkTasks { self.submit(&machine, TaskID.random()) }
        _ = self.effects(&machine)
        #expect(machine.holdForBulk(self.coordinator, now: self.t0) == .send)
        #expect(
            machine.holdForBulk(self.coordinator, now: self.t0 + .microseconds(300))
                == .hold(wakeAfter: .microseconds(700))
        )
        #expect(machine.holdForBulk(self.coordinator, now: self.t0 + .microseconds(500)) == .hold(wakeAfter: nil))
        machine.bulkWoke()
        #expect(machine.holdForBulk(self.coordinator, now: self.t0 + .milliseconds(1)) == .send)
        #expect(machine.holdForBulk(PeerID(Array("c-2".utf8)), now: self.t0) == .send)
    }

    @Test("--max-workers and --max-coordinators refuse the next one with the reason; STATUS is answered at the limit")
    func limits() {
        var machine = self.machine(maxWorkers: 1, maxCoordinators: 1)
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        self.ready(&machine, self.workerB)
        guard case .toWorker(self.workerB, .disconnect(.limit, let text)) = self.effects(&machine).first else {
            Issue.record("the second worker was not refused")
            return
        }
        #expect(text.contains("--max-workers") && machine.state.workers.count == 1)
        machine.coordinator(self.coordinator, .heartbeat(epoch: 0), key: nil, now: self.t0)
        _ = self.effects(&machine)
        let other = PeerID(Array("c-2".utf8))
        machine.coordinator(other, .statusRequest, key: nil, now: self.t0)
        #expect(self.effects(&machine) == [.statusReply(other)])
        self.submit(&machine, TaskID.random(), from: other)
        guard case .toCoordinator(other, .disconnect(.limit, let refusal)) = self.effects(&machine).first else {
            Issue.record("the second coordinator was not refused")
            return
        }
        #expect(refusal.contains("--max-coordinators") && machine.state.tasks.isEmpty)
    }

    @Test("once stopping: a SUBMIT is not accepted (it stays its coordinator's) and nothing is dispatched")
    func stopGate() {
        var machine = self.machine()
        let running = TaskID.random()
        self.ready(&machine, self.workerA, slots: 1)
        self.submit(&machine, running)
        self.submit(&machine, TaskID.random())
        _ = self.effects(&machine)
        #expect(machine.phase == .serving && !machine.isSettled)
        machine.beginStop()
        #expect(machine.phase == .stopping)
        self.submit(&machine, TaskID.random())
        #expect(self.effects(&machine).isEmpty, "no ACCEPTED, no REJECTED")
        // The running task's RESULT frees the slot; the queued one is not dispatched.
        #expect(machine.worker(self.workerA, self.result(running), frames: [], now: self.t0) == self.coordinator)
        #expect(!self.effects(&machine).contains { if case .task = $0 { true } else { false } })
        #expect(machine.isSettled && machine.state.queueDepth == 1)
    }

    @Test("durable: ACCEPTED and a RESULT leave only with the commit that covers their records, in order")
    func durablePromises() {
        var machine = self.machine(durable: true)
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        let id = TaskID.random()
        self.submit(&machine, id)
        let submitted = self.effects(&machine)
        #expect(submitted.count == 2 && submitted[1] == .task(worker: self.workerA, id))
        guard case .journal(.submit(id, _, 1, _, _)) = submitted[0] else {
            Issue.record("the SUBMIT was not journaled: \(submitted)")
            return
        }
        #expect(machine.journalCount == 1)
        let frames = self.result(id).encode()
        #expect(machine.worker(self.workerA, self.result(id), frames: frames, now: self.t0) == nil, "not forwarded yet")
        guard case .journal(.result(id, _, _)) = self.effects(&machine).first else {
            Issue.record("the RESULT was not journaled")
            return
        }
        machine.committed(1, now: self.t0)
        #expect(
            self.effects(&machine) == [
                .frames(self.coordinator, WireMessage.accepted(id, attempt: 1, requeued: false).encode(), keep: nil)
            ]
        )
        machine.committed(2, now: self.t0)
        #expect(self.effects(&machine) == [.frames(self.coordinator, frames, keep: id)])
        // Undeliverable: kept, and a resend of the task gets it instead of running again.
        machine.undeliverable(self.coordinator, frames: frames, result: id, now: self.t0)
        _ = self.effects(&machine)
        self.submit(&machine, id)
        #expect(self.effects(&machine).contains(.frames(self.coordinator, frames, keep: nil)))
    }

    @Test("a worker silent past its heartbeats is said lost in the broker's log, with the reason")
    func silentWorkerLogged() {
        let lines = CapturedLog()
        var machine = BrokerMachine(
            rules: BrokerRules(heartbeat: Heartbeat(interval: .milliseconds(200))),
            epoch: 7,
            logger: Logger(label: "test", factory: { _ in CapturedLog.Handler(log: lines) })
        )
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        machine.tick(now: self.t0 + .seconds(10))
        #expect(
            self.effects(&machine).contains(
                .toWorker(self.workerA, .disconnect(.unknownPeer, text: "missed 3 heartbeats"))
            )
        )
        let said = lines.lines.withLock { $0 }
        #expect(said.contains { $0.hasPrefix("info worker lost") && $0.contains("missed 3 heartbeats") }, "\(said)")
    }

    @Test("every peer the machine forgets has its outbox dropped, before any last word to it")
    func forgottenPeersOutboxDropped() {
        // A worker silent past its heartbeats: dropped, then told.
        var machine = self.machine(heartbeat: .milliseconds(200))
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        machine.tick(now: self.t0 + .seconds(10))
        var effects = self.effects(&machine)
        let drop = effects.firstIndex(of: .dropOutbox(self.workerA, front: false))
        let told = effects.firstIndex(
            of: .toWorker(self.workerA, .disconnect(.unknownPeer, text: "missed 3 heartbeats"))
        )
        #expect(drop != nil && told != nil && drop! < told!, "\(effects)")

        // A worker that says DISCONNECT.
        machine = self.machine()
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        _ = machine.worker(self.workerA, .disconnect(.shutdown, text: "bye"), frames: [], now: self.t0)
        #expect(self.effects(&machine).contains(.dropOutbox(self.workerA, front: false)))

        // A worker that breaks the protocol: dropped, then told why.
        machine = self.machine()
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        machine.workerBrokeProtocol(self.workerA, ProtocolError(.badMagic, "x"), now: self.t0)
        effects = self.effects(&machine)
        let dropped = effects.firstIndex(of: .dropOutbox(self.workerA, front: false))
        let goodbye = effects.firstIndex {
            if case .toWorker(self.workerA, .disconnect(.protocolError, _)) = $0 { return true }
            return false
        }
        #expect(dropped != nil && goodbye != nil && dropped! < goodbye!, "\(effects)")

        // A coordinator silent past its expiry (3 heartbeats, at least 10 s).
        machine = self.machine(heartbeat: .milliseconds(200))
        self.submit(&machine, TaskID.random())
        _ = self.effects(&machine)
        machine.tick(now: self.t0 + .seconds(11))
        #expect(self.effects(&machine).contains(.dropOutbox(self.coordinator, front: true)))
    }

    @Test("durable: a coordinator silent past its expiry is forgotten in the journal, and told when it is back")
    func durableExpiry() {
        var machine = self.machine(durable: true, heartbeat: .milliseconds(200))
        let id = TaskID.random()
        self.submit(&machine, id)
        _ = self.effects(&machine)
        // 3 heartbeats are 0.6 s; coordinators are kept at least 10 s.
        machine.tick(now: self.t0 + .seconds(5))
        #expect(machine.state.tasks[id] != nil)
        _ = self.effects(&machine)
        machine.tick(now: self.t0 + .seconds(11))
        #expect(self.effects(&machine).contains(.journal(.forget(id))))
        machine.coordinator(self.coordinator, .heartbeat(epoch: 0), key: nil, now: self.t0 + .seconds(12))
        guard case .toCoordinator(_, .disconnect(.unknownPeer, _)) = self.effects(&machine).first else {
            Issue.record("the expired coordinator was not told")
            return
        }
    }

    @Test("a detached job's results stay at the broker: failed attempts run again, the final one is kept for followers")
    func detachedJob() {
        var machine = self.machine(durable: true)
        self.ready(&machine, self.workerA)
        _ = self.effects(&machine)
        let job = TaskID.random()
        let id = TaskID.random()
        machine.coordinator(
            self.coordinator,
            .submitToJob(id, attempt: 1, self.envelope, input: [1], job: job),
            key: nil,
            now: self.t0
        )
        _ = self.effects(&machine)
        machine.coordinator(self.coordinator, .jobQuery(job: job, follow: true), key: nil, now: self.t0)
        _ = self.effects(&machine)
        // The first attempt fails: the broker runs it again itself, nothing goes to a coordinator.
        #expect(machine.worker(self.workerA, self.result(id, .failed), frames: [], now: self.t0) == nil)
        let retried = self.effects(&machine)
        #expect(retried.contains(.task(worker: self.workerA, id)) && retried.contains(.journal(.attempt(id, 2))))
        #expect(machine.worker(self.workerA, self.result(id, attempt: 2), frames: [], now: self.t0) == nil)
        let finished = self.effects(&machine)
        #expect(!finished.contains { if case .toCoordinator = $0 { true } else { false } }, "on disk first")
        machine.committed(machine.journalCount, now: self.t0)
        let sent = self.effects(&machine)
        #expect(sent.contains { if case .frames(self.coordinator, _, nil) = $0 { true } else { false } }, "\(sent)")
        #expect(sent.contains { if case .toCoordinator(self.coordinator, .jobReply) = $0 { true } else { false } })
        #expect(machine.jobStatus(job).completed == 1)
    }

    @Test("a coordinator known only from the journal is not lost when a send to it fails during its grace")
    func awaitingReconnect() {
        var machine = self.machine(durable: true)
        var recovery = JournalRecovery()
        let id = TaskID.random()
        recovery.pending = [
            .init(id: id, coordinator: self.coordinator, attempt: 1, envelope: self.envelope, input: [1], order: 0)
        ]
        #expect(machine.recover(recovery, now: self.t0) == 1)
        machine.coordinatorUnreachable(self.coordinator, now: self.t0)
        #expect(machine.state.tasks[id] != nil)
        machine.coordinator(self.coordinator, .heartbeat(epoch: 0), key: nil, now: self.t0)
        machine.coordinatorUnreachable(self.coordinator, now: self.t0)
        #expect(machine.state.tasks[id] == nil, "once it spoke, a failed send loses it")
    }

    @Test(
        "a coordinator dropped as unreachable (paused past libzmq's heartbeats: Ctrl-Z) is told to resend when it speaks again, once"
    )
    func unreachableCoordinatorToldToResend() {
        var machine = self.machine()
        let id = TaskID.random()
        self.submit(&machine, id)
        _ = self.effects(&machine)
        machine.coordinatorUnreachable(self.coordinator, now: self.t0)
        #expect(machine.state.tasks[id] == nil)
        _ = self.effects(&machine)
        // Back: its next word is answered with DISCONNECT "unknown peer", which makes it send its
        // unfinished tasks again; it was waiting for their results forever.
        machine.coordinator(self.coordinator, .heartbeat(epoch: 0), key: nil, now: self.t0 + .seconds(20))
        guard case .toCoordinator(self.coordinator, .disconnect(.unknownPeer, _)) = self.effects(&machine).first else {
            Issue.record("the coordinator back from a pause was not told its tasks were dropped")
            return
        }
        self.submit(&machine, id, at: self.t0 + .seconds(20))
        #expect(machine.state.tasks[id] != nil)
        machine.coordinator(self.coordinator, .heartbeat(epoch: 0), key: nil, now: self.t0 + .seconds(21))
        #expect(
            !self.effects(&machine).contains { if case .toCoordinator(_, .disconnect) = $0 { true } else { false } }
        )
        // One it never knew is not told anything.
        let stranger = PeerID(Array("c-stranger".utf8))
        machine.coordinatorUnreachable(stranger, now: self.t0)
        machine.coordinator(stranger, .heartbeat(epoch: 0), key: nil, now: self.t0 + .seconds(1))
        #expect(
            !self.effects(&machine).contains { if case .toCoordinator(_, .disconnect) = $0 { true } else { false } }
        )
    }

    @Test("a worker that breaks the protocol is dropped and told; its leases go back to the queue")
    func protocolError() {
        var machine = self.machine()
        self.ready(&machine, self.workerA)
        let id = TaskID.random()
        self.submit(&machine, id)
        _ = self.effects(&machine)
        machine.workerBrokeProtocol(self.workerA, ProtocolError(.badMagic, "x"), now: self.t0)
        let effects = self.effects(&machine)
        // Told after its outbox is dropped (``forgottenPeersOutboxDropped()``), so not first.
        let told = effects.contains {
            if case .toWorker(self.workerA, .disconnect(.protocolError, _)) = $0 { return true }
            return false
        }
        guard told else {
            Issue.record("not told: \(effects)")
            return
        }
        #expect(machine.state.workers.isEmpty && machine.state.queueDepth == 1)
        #expect(machine.badInput["bad magic"] == 1 || machine.badInput.values.reduce(0, +) == 1)
    }
}

/// Log lines kept for a test to read ("level message metadata").
final class CapturedLog: Sendable {
    let lines = Mutex<[String]>([])

    struct Handler: LogHandler {
        let log: CapturedLog
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = self.metadata.merging(event.metadata ?? [:]) { _, new in new }
            self.log.lines.withLock { $0.append("\(event.level) \(event.message) \(fields)") }
        }
    }
}
