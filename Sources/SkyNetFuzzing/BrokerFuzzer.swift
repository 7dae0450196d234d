import Glibc
import Logging
import SkyNetCore

/// A fuzzing harness (`make fuzz`): one input is a script of frames from several fake peers, fed
/// through the wire decoder (messages and BATCHes, and the in-place RESULT reader the broker's fast
/// path uses) into ``BrokerMachine``, the same entry points the ``Broker`` actor calls, with time
/// passing, journal commits, peers found unreachable, a graceful stop, ZAP requests and journal
/// records on the side. It carries out the machine's effects as the actor would (without sockets)
/// and checks what must always hold after every step; a violation traps, which libFuzzer reports
/// with the input that caused it.
///
/// An input of odd length runs a durable broker (a journal: ACCEPTED waits for its commit, detached
/// jobs are kept); of even length, one in memory (held ACCEPTEDs, RESULTs read in place).
///
/// Script: repeated `op` bytes; the low 3 bits choose the step, the rest its peer:
/// - 0–3: a message from peer `op >> 3 & 7` (0–3 workers on the backend, 4–7 coordinators on the
///   frontend): a frame count (mod 6), then each frame as a length byte (a set high bit adds a
///   second byte: up to 32 KiB) and its bytes;
/// - 4: time passes (the next byte × 10 ms): the tick (expiry, lease deadlines, heartbeats) and the
///   ACCEPTED hold's timer; the byte 255 begins a graceful stop instead;
/// - 5: the journal commits (all but the next byte mod 4 of the records appended); with bit 3 set,
///   peer `op >> 4 & 7` is found unreachable instead;
/// - 6: a ZAP request (the same frame encoding) decided by an allowlist policy;
/// - 7: a journal record (a length-prefixed payload) decoded, and re-encoded when it decodes.
package struct BrokerFuzzer: ~Copyable {
    private var machine: BrokerMachine
    private var now: ContinuousClock.Instant
    private let start: ContinuousClock.Instant
    /// Four workers and four coordinators, with ids in each of ``PeerID``'s forms: short ones kept as
    /// they are, SkyNet's 32-byte form, and a long one (kept in the table of long ids).
    private let peers: [PeerID] = (0..<8).map { index in
        let role = index < 4 ? "w" : "c"
        let text =
            switch index % 4 {
            case 2: "\(role)-\(String(repeating: "0", count: 29))\(index)"
            case 3: "\(role)-fuzz-a-long-routing-id-\(index)"
            default: "\(role)-fuzz-\(index)"
            }
        return PeerID(Array(text.utf8))
    }
    private let policy: ZAPPolicy
    /// Journal records the actor would have appended.
    private var appended: UInt64 = 0
    private var stopped = false

    package init(durable: Bool) {
        self.now = ContinuousClock.now
        self.start = self.now
        let key = String(repeating: "0", count: 40)
        self.policy = ZAPPolicy(
            workers: Allowlist(directory: "w", names: [key: "w"]),
            coordinators: Allowlist(directory: "c", names: [:])
        )
        let rules = BrokerRules(
            heartbeat: Heartbeat(interval: .milliseconds(100), liveness: 3),
            maxQueuedTasks: 64,
            maxQueuedPerCoordinator: 48,
            maxWorkers: 3,
            maxCoordinators: 3,
            durable: durable,
            recoveryGrace: .seconds(1),
            jobRetention: .seconds(2)
        )
        self.machine = BrokerMachine(
            rules: rules,
            epoch: 1,
            logger: Logger(label: "fuzz", factory: { _ in SwiftLogNoOpLogHandler() })
        )
    }

    /// Runs one input.
    package static func run(_ data: UnsafeRawBufferPointer) {
        var fuzzer = BrokerFuzzer(durable: data.count % 2 == 1)
        var input = Cursor(data)
        var steps = 0
        while let op = input.byte(), steps < 256 {
            steps += 1
            switch op & 7 {
            case 0...3:
                let peer = Int(op >> 3 & 7)
                fuzzer.message(input.frames(), from: peer)
            case 4:
                let byte = input.byte() ?? 0
                if byte == 255 { fuzzer.stop() } else { fuzzer.advance(by: .milliseconds(Int(byte) * 10)) }
            case 5:
                let byte = input.byte() ?? 0
                if op & 8 != 0 {
                    fuzzer.unreachable(Int(op >> 4 & 7))
                } else {
                    fuzzer.commit(leaving: UInt64(byte % 4))
                }
            case 6:
                if let request = ZAPRequest.parse(input.frames()) {
                    let (reply, refusal) = fuzzer.policy.decide(request)
                    precondition(reply.frames.count == 6 && reply.requestID == request.requestID)
                    precondition((reply.status == "200") == (refusal == nil), "a refusal says 400, and only it")
                }
            default:
                let payload = input.frames().first ?? []
                if let record = try? JournalRecord.decode(payload[...]) {
                    let framed = record.framed()
                    precondition(
                        (try? JournalRecord.decode(framed[8...])) == record,
                        "a decoded journal record re-encodes to itself"
                    )
                }
            }
            fuzzer.check()
        }
        fuzzer.checkStatus()
    }

    // MARK: Steps

    private mutating func message(_ frames: [[UInt8]], from index: Int) {
        let peer = self.peers[index]
        let worker = index < 4
        if Self.tracing { Self.trace("\(peer): \(frames.count) frames\n") }
        // The broker's fast path reads a RESULT in place; it must agree with the full decoder.
        let decoded = Result { () throws(ProtocolError) -> WireMessage in try WireMessage.decode(frames) }
        let viewed = Self.withRawFrames(frames) { raw in Result { () throws(ProtocolError) in try ResultView(raw) } }
        if case .success(let view?) = viewed {
            guard case .success(.result(let id, let attempt, let status, let meta, _)) = decoded else {
                preconditionFailure("the in-place RESULT reader accepted what the decoder refuses")
            }
            precondition(view.taskID == id && view.attempt == attempt && view.status == status)
            precondition(view.durationMicroseconds == meta.durationMicroseconds, "the in-place duration differs")
            if worker, !self.machine.durable {
                // What the actor does with a RESULT without a journal.
                _ = self.machine.result(
                    from: peer,
                    view.taskID,
                    attempt: view.attempt,
                    status: view.status,
                    runMicroseconds: view.durationMicroseconds,
                    now: self.now
                )
                return self.perform()
            }
        }
        switch decoded {
        case .failure(let error):
            if worker {
                self.machine.workerBrokeProtocol(peer, error, now: self.now)
            } else {
                self.machine.coordinatorBrokeProtocol(peer, error)
            }
        case .success(.batch(let messages)) where worker:
            for frames in messages {
                Self.checkInPlaceTask(frames)
                guard let inner = try? WireMessage.decode(frames) else {
                    self.machine.workerBrokeProtocol(peer, ProtocolError(.badFrameCount, "fuzz"), now: self.now)
                    break
                }
                _ = self.machine.worker(peer, inner, frames: frames, now: self.now)
                self.perform()
            }
        case .success(.batch(let messages)):
            for frames in messages {
                Self.checkInPlaceTask(frames)
                let inner = try? WireMessage.decode(frames)
                // What the actor does with a BATCH's SUBMITs: read in place, the input kept as
                // `TaskBytes`. The in-place reader must agree with the full decoder.
                let parts = Self.withRawFrames(frames) { raw in
                    (try? WireMessage.taskParts(raw, .submit))?.map {
                        ($0.id, $0.attempt, $0.envelope, TaskBytes($0.input))
                    }
                }
                if case .submit(let id, let attempt, let envelope, let input)? = inner {
                    guard let parts, parts.0 == id, parts.1 == attempt, parts.2 == envelope, parts.3.array == input
                    else { preconditionFailure("the in-place SUBMIT reader disagrees with the decoder") }
                    precondition(
                        parts.3 == TaskBytes(input) && parts.3.count == input.count,
                        "TaskBytes changed the input"
                    )
                    // Whether the sender reads ACCEPTED lists: from the id, so both kinds of coordinator come.
                    self.machine.coordinatorSubmit(
                        peer,
                        id,
                        attempt: attempt,
                        envelope,
                        input: parts.3,
                        readsAcceptedLists: id.low & 1 == 1,
                        now: self.now
                    )
                    self.perform()
                } else {
                    precondition(parts == nil, "the in-place SUBMIT reader accepted what the decoder refuses")
                    if let inner { self.fromCoordinator(peer, inner) }
                }
            }
        case .success(let message) where worker:
            _ = self.machine.worker(peer, message, frames: Array(frames), now: self.now)
        case .success(let message):
            self.fromCoordinator(peer, message)
        }
        self.perform()
    }

    private mutating func fromCoordinator(_ peer: PeerID, _ message: WireMessage) {
        // Two coordinators share a key (a detached job is visible to its key only).
        let key = peer == self.peers[7] ? "other-key" : "fuzz-key"
        self.machine.coordinator(peer, message, key: key, now: self.now)
        self.perform()
    }

    /// `SKYNET_FUZZ_TRACE=1`: print each step (to find out what an input found).
    private static let tracing = getenv("SKYNET_FUZZ_TRACE") != nil

    private static func trace(_ line: String) {
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    private mutating func advance(by duration: Duration) {
        if Self.tracing { Self.trace("time +\(duration)\n") }
        self.now = self.now + duration
        // The hold's timer is armed while the machine holds ACCEPTEDs, as the broker's is.
        if self.machine.holdsAccepted, duration >= BrokerMachine.acceptedHold { self.machine.acceptedHoldExpired() }
        self.machine.tick(now: self.now)
        self.perform()
    }

    private mutating func stop() {
        if Self.tracing { Self.trace("stop\n") }
        self.machine.beginStop()
        self.stopped = true
        precondition(self.machine.phase == .stopping)
    }

    private mutating func commit(leaving count: UInt64) {
        let seq = self.appended > count ? self.appended - count : 0
        if Self.tracing { Self.trace("commit \(seq) of \(self.appended)\n") }
        self.machine.committed(seq, now: self.now)
        self.perform()
    }

    private mutating func unreachable(_ index: Int) {
        if Self.tracing { Self.trace("\(self.peers[index]) unreachable\n") }
        if index < 4 {
            self.machine.workerLost(self.peers[index], reason: "unreachable", now: self.now)
        } else {
            self.machine.coordinatorUnreachable(self.peers[index], now: self.now)
        }
        self.perform()
    }

    /// Carries out the effects as the actor would, checking each: a TASK goes only to a registered
    /// worker that scans its kind and has a slot for it, never while stopping; a journal record
    /// only from a durable broker.
    private mutating func perform() {
        precondition(!self.machine.durable || !self.machine.holdsAccepted, "a durable broker holds no ACCEPTED")
        var effects: [BrokerMachine.Effect] = []
        self.machine.takeEffects { effects.append($0) }
        if Self.tracing, !effects.isEmpty { Self.trace("  -> \(effects)\n") }
        for effect in effects {
            switch effect {
            case .task(let worker, let id, let hint):
                precondition(!self.stopped, "dispatched while stopping")
                precondition(
                    hint == .none || hint.slot == .max || self.machine.state.tasks.slot(of: id) == hint.slot,
                    "a TASK's slot hint names another slot than the task's"
                )
                guard let entry = self.machine.state.workers[worker], let task = self.machine.state.tasks[id] else {
                    preconditionFailure("dispatched to an unknown worker, or an unknown task")
                }
                precondition(!entry.draining, "dispatched to a draining worker")
                precondition(entry.kinds.contains(task.envelope.kind), "dispatched a kind the worker does not scan")
                precondition(
                    entry.leases.count + entry.stuck.count <= entry.load.limit,
                    "more tasks than slots and what is lent to a worker of short tasks"
                )
                precondition(task.worker == worker, "the task's lease names another worker")
            case .journal(let record):
                precondition(self.machine.durable, "a journal record from a broker without a journal")
                self.appended += 1
                _ = record.framed()
            case .accepted(let held, let list):
                precondition(!self.machine.durable, "a durable broker holds no ACCEPTED")
                Self.checkAccepted(
                    held,
                    list: list,
                    readsLists: held.first.map { self.machine.readsAcceptedLists($0.coordinator) } ?? false
                )
            case .toCoordinator(let peer, _), .frames(let peer, _, _), .statusReply(let peer):
                precondition(peer.job == nil, "a message for a detached job, which is not a peer")
            case .toWorker, .dropOutbox:
                break
            }
        }
        precondition(self.appended == self.machine.journalCount, "the journal and the machine count alike")
    }

    /// What must hold after every step: every lease is its task's, every leased task its worker's, and
    /// the queue depth counts the tasks no worker holds, in all and by kind (the queues' live counts).
    private func check() {
        var queued = 0
        var byKind: [String: Int] = [:]
        self.machine.state.tasks.forEach { entry in
            if let worker = entry.worker {
                precondition(
                    self.machine.state.workers[worker]?.leases.contains(entry.id) == true,
                    "a lease its worker lost"
                )
            } else {
                queued += 1
                byKind[entry.envelope.kind, default: 0] += 1
            }
        }
        precondition(
            queued == self.machine.state.queueDepth,
            "queue depth \(self.machine.state.queueDepth), \(queued) queued"
        )
        let figures = self.machine.state.figures
        precondition(
            figures.submitted + figures.recovered
                == figures.resultsCompleted + figures.resultsFailed + figures.resultsCancelled
                + self.machine.state.inFlight,
            "the task counters do not reconcile: \(figures), \(self.machine.state.inFlight) in flight"
        )
        precondition(
            byKind == self.machine.state.depthByKind,
            "depth by kind \(self.machine.state.depthByKind), \(byKind) queued"
        )
        precondition(self.machine.state.workers.count <= 3, "more workers than --max-workers")
        precondition(self.machine.state.connectedCoordinators <= 3, "more coordinators than --max-coordinators")
        // The snapshot agrees, and no queued task is older than the time the fuzzer has let pass.
        for (kind, figures) in self.machine.state.kindFigures(now: self.now) {
            precondition(
                kind == BrokerState.otherKinds || figures.queued == byKind[kind] ?? 0,
                "kind figures \(kind): \(figures.queued) queued"
            )
            precondition(
                figures.oldestQueuedSeconds <= (self.now - self.start).seconds + 0.001,
                "an age from the future"
            )
            precondition(figures.queueWait.cumulative.last == figures.queueWait.count, "histogram buckets and count")
        }
        precondition(self.machine.state.endedJobs.count <= BrokerState.endedJobsKept)
        for (id, worker) in self.machine.state.workers {
            for lease in worker.leases {
                // A cancelled task (or a lost coordinator's) is gone from the table while its worker
                // still runs it: the slot stays taken until its RESULT comes.
                precondition(
                    self.machine.state.tasks[lease].map { $0.worker == id } ?? true,
                    "a worker holds a task leased elsewhere"
                )
            }
        }
    }

    /// What the status snapshot (STATUS, the dashboard, /metrics) reads never traps: once an input,
    /// at its end (a snapshot every step would cost most of the fuzzer's time).
    private func checkStatus() {
        _ = BrokerStatus(state: self.machine.state, now: self.now, epoch: 1, badInput: self.machine.badInput, parked: 0)
    }

    /// What a worker does with a BATCH's TASKs: reads them in place (``WireMessage/taskParts(_:_:)``)
    /// and scans the input where it lies. That reader must agree with the full decoder on every
    /// packed message, whichever side it came from.
    private static func checkInPlaceTask(_ frames: [[UInt8]]) {
        let decoded = try? WireMessage.decode(frames)
        let parts = Self.withRawFrames(frames) { raw in
            (try? WireMessage.taskParts(raw, .task))?.map { ($0.id, $0.attempt, $0.envelope, Array($0.input)) }
        }
        if case .task(let id, let attempt, let envelope, let input)? = decoded {
            precondition(
                parts.map { $0.0 == id && $0.1 == attempt && $0.2 == envelope && $0.3 == input } == true,
                "the in-place TASK reader disagrees with the decoder"
            )
        } else {
            precondition(parts == nil, "the in-place TASK reader accepted what the decoder refuses")
        }
    }

    private static func withRawFrames<R>(_ frames: [[UInt8]], _ body: (WireMessage.RawFrames) -> R) -> R {
        var buffers: [UnsafeRawBufferPointer] = []
        var storage: [UnsafeMutableRawBufferPointer] = []
        for frame in frames {
            let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(frame.count, 1), alignment: 1)
            frame.withUnsafeBytes { source in
                if let base = source.baseAddress { copy.baseAddress!.copyMemory(from: base, byteCount: source.count) }
            }
            storage.append(copy)
            buffers.append(UnsafeRawBufferPointer(start: copy.baseAddress, count: frame.count))
        }
        defer { for copy in storage { copy.deallocate() } }
        return buffers.withUnsafeBufferPointer { body($0) }
    }

    /// Reads the script.
    private struct Cursor {
        package let data: UnsafeRawBufferPointer
        package var offset = 0

        package init(_ data: UnsafeRawBufferPointer) { self.data = data }

        package mutating func byte() -> UInt8? {
            guard self.offset < self.data.count else { return nil }
            defer { self.offset += 1 }
            return self.data[self.offset]
        }

        package mutating func frames() -> [[UInt8]] {
            let count = Int(self.byte() ?? 0) % 6
            return (0..<count).map { _ in
                var length = Int(self.byte() ?? 0)
                if length & 0x80 != 0 { length = (length & 0x7F) << 8 | Int(self.byte() ?? 0) }
                let end = min(self.data.count, self.offset + length)
                defer { self.offset = end }
                return Array(self.data[self.offset..<end])
            }
        }
    }
}

extension BrokerFuzzer {
    /// Seed inputs made from real encodings (`skynet-fuzz --seeds DIR` writes them): a worker
    /// registers, coordinators submit (alone and in a BATCH, with deadlines), results come back,
    /// tasks are cancelled, a worker drains and another is lost, time passes; a ZAP request and a
    /// journal record.
    package static func seeds() -> [String: [UInt8]] {
        func message(_ peer: UInt8, _ frames: [[UInt8]]) -> [UInt8] {
            var out: [UInt8] = [peer << 3, UInt8(frames.count)]
            for frame in frames {
                if frame.count < 0x80 {
                    out.append(UInt8(frame.count))
                } else {
                    out += [UInt8(0x80 | (frame.count >> 8) & 0x7F), UInt8(frame.count & 0xFF)]
                }
                out += frame
            }
            return out
        }
        let ids = (0..<6).map { TaskID(high: 0x1234_5678_9abc_4def, low: 0x8000_0000_0000_0000 | UInt64($0)) }
        let ready = WireMessage.ready(
            capacity: 4,
            ReadyInfo(name: "w0", kinds: ["sector"], heartbeatMilliseconds: 100, version: "fuzz")
        ).encode()
        let envelope = TaskEnvelope(kind: "sector", priority: 0, timeoutMilliseconds: 50, maxAttempts: 3)
        let submits = ids.map { WireMessage.submit($0, attempt: 1, envelope, input: [1, 2, 3]).encode() }
        let meta = ResultMeta(system: "w0", durationMicroseconds: 10, slot: 0, busy: 1)
        let results = ids.map { WireMessage.result($0, attempt: 1, .completed, meta, body: [7]).encode() }
        var flow = message(0, ready) + message(4, WireMessage.batch(Array(submits[0..<4])).encode())
        for result in results.prefix(3) { flow += message(0, result) }
        flow += message(5, submits[4]) + message(5, WireMessage.cancel(ids[4]).encode())
        flow += message(0, WireMessage.disconnect(.draining, text: "bye").encode())
        flow += message(1, ready) + [4, 100] + message(4, WireMessage.heartbeat(epoch: 0).encode())
        flow += message(6, WireMessage.disconnect(.shutdown, text: "done").encode()) + [5, 1]
        let zap: [[UInt8]] = [
            Array("1.0".utf8), [1], Array(ZAPPolicy.backendDomain.utf8), Array("127.0.0.1".utf8), [],
            Array("CURVE".utf8), [UInt8](repeating: 0, count: 32),
        ]
        var zapSeed: [UInt8] = [6, UInt8(zap.count)]
        for frame in zap { zapSeed += [UInt8(frame.count)] + frame }
        let record = JournalRecord.submit(
            ids[0],
            coordinator: PeerID(Array("c-1".utf8)),
            attempt: 1,
            envelope,
            input: [9]
        )
        .framed()
        let journalSeed: [UInt8] = [7, 1, UInt8(record.count - 8)] + record[8...]
        // A BATCH as one frame: its header with the packed messages after it.
        func oneFrame(_ batch: [[UInt8]]) -> [[UInt8]] { [batch[0] + batch[1]] }
        return [
            "flow": flow,
            "results-in-batch": message(0, ready) + message(4, submits[0]) + message(4, submits[1])
                + message(0, WireMessage.batch(Array(results[0..<2])).encode()),
            "one-frame-batches": message(0, ready)
                + message(4, oneFrame(WireMessage.batch(Array(submits[0..<3])).encode()))
                + message(0, oneFrame(WireMessage.batch(Array(results[0..<2])).encode())),
            "lost-worker": message(0, ready) + message(4, submits[5]) + [4, 60, 4, 60],
            "zap": zapSeed,
            "journal-record": journalSeed,
        ]
    }
}
