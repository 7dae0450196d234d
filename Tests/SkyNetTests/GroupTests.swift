import Logging
import Testing

@testable import SkyNet
@testable import SkyNetCore

/// HA mode's pure parts: a standby machine's answers, the journal's size limit, and how a client
/// picks among the members of a group (``BrokerList``).
@Suite("HA group: a standby's answers, the size limit, following the leader")
struct GroupTests {
    let t0 = ContinuousClock.now
    let coordinator = PeerID(Array("c-1".utf8))
    let worker = PeerID(Array("w-a".utf8))
    let envelope = TaskEnvelope(kind: "sector", priority: 0, maxAttempts: 3)
    let leader = Leadership.Record(member: "b1", frontend: "tcp://b1:5555", backend: "tcp://b1:5556")

    func machine(maxRecordBytes: Int = .max) -> BrokerMachine {
        var rules = BrokerRules(durable: true)
        rules.maxRecordBytes = maxRecordBytes
        rules.forgetsDelivered = true
        return BrokerMachine(
            rules: rules,
            epoch: 7,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        )
    }

    func effects(_ machine: inout BrokerMachine) -> [BrokerMachine.Effect] {
        var effects: [BrokerMachine.Effect] = []
        machine.takeEffects { effects.append($0) }
        return effects
    }

    @Test("a standby takes no task: every peer hears 'not the leader' and where the leader is for its port")
    func standbyRedirects() {
        var machine = self.machine()
        machine.standBy(leader: nil)
        let id = TaskID.random()
        machine.coordinator(
            self.coordinator,
            .submit(id, attempt: 1, self.envelope, input: [1]),
            key: nil,
            now: self.t0
        )
        #expect(self.effects(&machine) == [.toCoordinator(self.coordinator, .disconnect(.notLeader, text: ""))])
        #expect(machine.state.tasks[id] == nil)

        machine.standBy(leader: self.leader)
        let info = ReadyInfo(name: "w", kinds: ["sector"], heartbeatMilliseconds: 1000, version: "test")
        _ = machine.worker(self.worker, .ready(capacity: 4, info), frames: [], now: self.t0)
        #expect(self.effects(&machine) == [.toWorker(self.worker, .disconnect(.notLeader, text: "tcp://b1:5556"))])
        #expect(machine.state.workers.isEmpty)
        machine.coordinator(self.coordinator, .heartbeat(epoch: 0), key: nil, now: self.t0)
        #expect(
            self.effects(&machine) == [.toCoordinator(self.coordinator, .disconnect(.notLeader, text: "tcp://b1:5555"))]
        )
        // STATUS is answered (each member's role), a DISCONNECT is not.
        machine.coordinator(self.coordinator, .statusRequest, key: nil, now: self.t0)
        #expect(self.effects(&machine) == [.statusReply(self.coordinator)])
        machine.coordinator(self.coordinator, .disconnect(.shutdown, text: ""), key: nil, now: self.t0)
        #expect(self.effects(&machine).isEmpty)
        machine.tick(now: self.t0 + .seconds(10))
        #expect(self.effects(&machine).isEmpty)

        // Leading, it serves: the SUBMIT is journaled (ACCEPTED waits for the commit).
        machine.lead()
        machine.coordinator(
            self.coordinator,
            .submit(id, attempt: 1, self.envelope, input: [1]),
            key: nil,
            now: self.t0
        )
        #expect(self.effects(&machine).contains { if case .journal(.submit) = $0 { true } else { false } })
        #expect(machine.state.tasks[id] != nil)
    }

    @Test("over the journal's limit: a SUBMIT is rejected with the reason, a result is kept as a failure")
    func recordLimit() {
        var machine = self.machine(maxRecordBytes: 100)
        let big = TaskID.random()
        machine.coordinator(
            self.coordinator,
            .submit(big, attempt: 1, self.envelope, input: Array(repeating: 7, count: 200)),
            key: nil,
            now: self.t0
        )
        let rejected = self.effects(&machine)
        guard case .toCoordinator(_, .rejected(big, .invalid, let text))? = rejected.first else {
            Issue.record("not rejected: \(rejected)")
            return
        }
        #expect(text.contains("over the journal's limit of 100"))
        #expect(machine.state.tasks[big] == nil)

        // A task that fits, whose result does not.
        let id = TaskID.random()
        let info = ReadyInfo(name: "w", kinds: ["sector"], heartbeatMilliseconds: 1000, version: "test")
        _ = machine.worker(self.worker, .ready(capacity: 4, info), frames: [], now: self.t0)
        machine.coordinator(
            self.coordinator,
            .submit(id, attempt: 1, self.envelope, input: [1]),
            key: nil,
            now: self.t0
        )
        _ = self.effects(&machine)
        let meta = ResultMeta(system: "w", durationMicroseconds: 1, slot: 0, busy: 0)
        let result = WireMessage.result(id, attempt: 1, .completed, meta, body: Array(repeating: 1, count: 500))
        _ = machine.worker(self.worker, result, frames: result.encode(), now: self.t0)
        let stored = self.effects(&machine).compactMap { effect -> [[UInt8]]? in
            if case .journal(.result(id, _, let frames)) = effect { frames } else { nil }
        }
        #expect(stored.count == 1)
        if let frames = stored.first, case .result(_, _, let status, _, let body)? = try? WireMessage.decode(frames) {
            #expect(status == .failed)
            #expect(String(decoding: body, as: UTF8.self).contains("over the journal's limit"))
        } else {
            Issue.record("the stored result does not decode")
        }
        // Committed: it goes to its coordinator, and is forgotten (a journal of keys keeps it otherwise).
        machine.committed(machine.journalCount, now: self.t0)
        let sent = self.effects(&machine)
        #expect(sent.contains { if case .frames(self.coordinator, _, _) = $0 { true } else { false } })
        #expect(sent.contains { if case .journal(.delivered(id)) = $0 { true } else { false } })
    }

    @Test(
        "etcd's journal: a task's key holds its SUBMIT then its RESULT; an attempt key whose task is gone is an orphan"
    )
    func oneKeyATask() {
        let layout = EtcdJournalLayout(cluster: "t", fence: 9)
        let (live, done) = (TaskID.random(), TaskID.random())
        let submit = layout.operations(
            for: .submit(live, coordinator: self.coordinator, attempt: 1, self.envelope, input: [1]),
            seq: 1
        )
        let result = layout.operations(for: .result(live, coordinator: self.coordinator, frames: [[1]]), seq: 2)
        let delivered = layout.operations(for: .delivered(live), seq: 3)
        #expect(submit.count == 1 && result.count == 1 && delivered.count == 1, "three writes a task")
        guard case .put(let key, _, _) = submit[0], case .put(key, _, _) = result[0],
            case .deleteRange(key, nil) = delivered[0]
        else {
            Issue.record("not one key: \(submit) \(result) \(delivered)")
            return
        }
        let attemptKey = { (id: TaskID) in Array("skynet/t/j/attempt/\(id)".utf8) }
        let values = [
            EtcdAPI.KeyValue(key: key, value: [], createRevision: 1, modRevision: 1),
            EtcdAPI.KeyValue(key: attemptKey(live), value: [], createRevision: 2, modRevision: 2),
            EtcdAPI.KeyValue(key: attemptKey(done), value: [], createRevision: 3, modRevision: 3),
        ]
        #expect(layout.orphanAttempts(in: values) == [attemptKey(done)])
    }

    @Test(
        "a client's list: silent members are left, a standby's hint is followed unless it names one just found silent"
    )
    func followingTheLeader() {
        var list = BrokerList(" tcp://a:5555, tcp://b:5555 ,tcp://a:5555,")
        #expect(list.endpoints == ["tcp://a:5555", "tcp://b:5555"])
        #expect(list.isGroup && list.current == "tcp://a:5555")
        #expect(!BrokerList("tcp://a:5555").isGroup)

        // a went silent: b; b (a standby) still names a, whose lease has not expired: stay on b.
        #expect(list.silent(now: self.t0) == "tcp://b:5555")
        #expect(list.notLeader(hint: "tcp://a:5555", now: self.t0 + .seconds(1)) == nil)
        #expect(list.notLeader(hint: "", now: self.t0 + .seconds(1)) == nil)
        #expect(list.current == "tcp://b:5555")
        // Long after, a leads again (b named it): go there.
        #expect(
            list.notLeader(hint: "tcp://a:5555", now: self.t0 + BrokerList.avoidFor + .seconds(1)) == "tcp://a:5555"
        )
        // A leader this client was not given: the next member it was given.
        #expect(list.notLeader(hint: "tcp://elsewhere:5555", now: self.t0 + .seconds(30)) == "tcp://b:5555")
        // A lone broker that is a standby: nowhere else to go.
        var lone = BrokerList("tcp://a:5555")
        #expect(lone.notLeader(hint: "tcp://b:5555", now: self.t0) == nil)
        #expect(lone.silent(now: self.t0) == "tcp://a:5555")
    }
}
