import Glibc
import ZeroMQ

/// A fuzzing harness (`make fuzz`): one input is a script of frames from several fake peers, fed
/// through the wire decoder (messages and BATCHes, and the in-place RESULT reader the broker's fast
/// path uses) into the broker's pure state machines, with time passing, journal records and ZAP
/// requests on the side. After every step it checks what must always hold; a violation traps, which
/// libFuzzer reports with the input that caused it.
///
/// Script: repeated `op` bytes; the low 3 bits choose the step, the rest its peer:
/// - 0–3: a message from peer `op >> 3 & 7` (0–3 workers on the backend, 4–7 coordinators on the
///   frontend): a frame count (mod 6), then each frame as a length byte (a set high bit adds a
///   second byte: up to 32 KiB) and its bytes;
/// - 4: time passes (the next byte × 10 ms): heartbeat expiry, lease deadlines;
/// - 5: journal commits (the commit pipeline releases in order what it holds);
/// - 6: a ZAP request (the same frame encoding) decided by an allowlist policy;
/// - 7: a journal record (a length-prefixed payload) decoded, and re-encoded when it decodes.
package struct BrokerFuzzer {
    private var state = BrokerState(heartbeat: Heartbeat(interval: .milliseconds(100), liveness: 3), maxQueued: 64)
    private var pipeline = CommitPipeline()
    private var deadlines = LeaseDeadlines()
    private var now: ContinuousClock.Instant
    private let start: ContinuousClock.Instant
    private var seq: UInt64 = 0
    private let peers: [PeerID] = (0..<8).map { PeerID(Array(($0 < 4 ? "w-fuzz-\($0)" : "c-fuzz-\($0)").utf8)) }
    private let policy: ZAPPolicy

    package init() {
        self.now = ContinuousClock.now
        self.start = self.now
        let key = String(repeating: "0", count: 40)
        self.policy = ZAPPolicy(
            workers: Allowlist(directory: "w", names: [key: "w"]),
            coordinators: Allowlist(directory: "c", names: [:])
        )
    }

    /// Runs one input.
    package static func run(_ data: UnsafeRawBufferPointer) {
        var fuzzer = BrokerFuzzer()
        var input = Cursor(data)
        var steps = 0
        while let op = input.byte(), steps < 256 {
            steps += 1
            switch op & 7 {
            case 0...3:
                let peer = Int(op >> 3 & 7)
                fuzzer.message(input.frames(), from: peer)
            case 4:
                fuzzer.advance(by: .milliseconds(Int(input.byte() ?? 0) * 10))
            case 5:
                fuzzer.commit(UInt64(input.byte() ?? 0))
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
    }

    // MARK: Steps

    private mutating func message(_ frames: [[UInt8]], from index: Int) {
        let peer = self.peers[index]
        // The broker's fast path reads a RESULT in place; it must agree with the full decoder.
        let decoded = Result { () throws(ProtocolError) -> WireMessage in try WireMessage.decode(frames) }
        let viewed = Self.withRawFrames(frames) { raw in Result { () throws(ProtocolError) in try ResultView(raw) } }
        if case .success(let view?) = viewed {
            guard case .success(.result(let id, let attempt, let status, let meta, _)) = decoded else {
                preconditionFailure("the in-place RESULT reader accepted what the decoder refuses")
            }
            precondition(view.taskID == id && view.attempt == attempt && view.status == status)
            precondition(view.durationMicroseconds == meta.durationMicroseconds, "the in-place duration differs")
        }
        guard case .success(let message) = decoded else { return }
        if case .batch(let messages) = message {
            for frames in messages {
                if let inner = try? WireMessage.decode(frames) { self.handle(inner, from: peer, worker: index < 4) }
            }
        } else {
            self.handle(message, from: peer, worker: index < 4)
        }
    }

    /// `SKYNET_FUZZ_TRACE=1`: print each step (to find out what an input found).
    private static let tracing = getenv("SKYNET_FUZZ_TRACE") != nil

    private static func trace(_ line: String) {
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    private mutating func handle(_ message: WireMessage, from peer: PeerID, worker: Bool) {
        if Self.tracing { Self.trace("\(peer): \(message)\n") }
        let actions: [BrokerState.Action]
        if worker {
            switch message {
            case .ready(let capacity, let info):
                actions = self.state.workerReady(peer, capacity: Int(capacity), info: info, now: self.now)
            case .heartbeat, .progress:
                _ = self.state.workerSeen(peer, now: self.now)
                actions = []
            case .disconnect(.draining, _):
                actions = self.state.workerDraining(peer)
            case .disconnect:
                actions = self.state.workerLost(peer, reason: "fuzz")
            case .result(let id, let attempt, let status, let meta, _):
                self.deadlines.answered(id, by: peer, attempt: attempt)
                actions =
                    self.state.workerResult(
                        peer,
                        taskID: id,
                        attempt: attempt,
                        status: status,
                        runMicroseconds: meta.durationMicroseconds,
                        now: self.now
                    ).1
            default:
                actions = []
            }
        } else {
            switch message {
            case .submit(let id, let attempt, let envelope, let input):
                actions = self.state.submit(
                    id,
                    attempt: attempt,
                    envelope: envelope,
                    input: input,
                    from: peer,
                    now: self.now
                )
            case .cancel(let id):
                actions = self.state.cancel(id, from: peer)
            case .heartbeat:
                _ = self.state.coordinatorSeen(peer, now: self.now)
                actions = []
            case .disconnect:
                actions = self.state.coordinatorLost(peer)
            case .jobFigures(let figures):
                self.state.coordinatorJob(peer, figures, now: self.now)
                actions = []
            default:
                actions = []
            }
        }
        self.apply(actions)
    }

    private mutating func advance(by duration: Duration) {
        if Self.tracing { Self.trace("time +\(duration)\n") }
        self.now = self.now + duration
        self.apply(self.state.tick(now: self.now))
        for (id, lease) in self.deadlines.expire(now: self.now) {
            self.apply(self.state.expireLease(id, worker: lease.worker, attempt: lease.attempt))
        }
    }

    private mutating func commit(_ count: UInt64) {
        self.seq += 1
        self.pipeline.appended(self.seq)
        self.pipeline.deferUntilCommitted([[UInt8(truncatingIfNeeded: self.seq)]], to: self.peers[4])
        let released = self.pipeline.committed(self.seq &- count % 4)
        var last: UInt64 = 0
        for message in released {
            precondition(
                message.seq >= last && message.seq <= self.pipeline.committed,
                "released in order, once committed"
            )
            last = message.seq
        }
    }

    private mutating func apply(_ actions: [BrokerState.Action]) {
        if Self.tracing, !actions.isEmpty { Self.trace("  -> \(actions)\n") }
        for action in actions {
            guard case .dispatch(let worker, let id) = action else { continue }
            guard let entry = self.state.workers[worker], let task = self.state.tasks[id] else {
                preconditionFailure("dispatched to an unknown worker, or an unknown task")
            }
            precondition(!entry.draining, "dispatched to a draining worker")
            precondition(entry.kinds.contains(task.envelope.kind), "dispatched a kind the worker does not scan")
            precondition(entry.leases.count + entry.stuck.count <= entry.capacity, "more tasks than slots")
            precondition(task.worker == worker, "the task's lease names another worker")
            if task.envelope.timeoutMilliseconds > 0 {
                self.deadlines.leased(id, to: worker, attempt: task.attempt, deadline: self.now + .seconds(1))
            }
        }
    }

    /// What must hold after every step: every lease is its task's, every leased task its worker's, and
    /// the queue depth counts the tasks no worker holds, in all and by kind (the queues' live counts).
    private func check() {
        var queued = 0
        var byKind: [String: Int] = [:]
        self.state.tasks.forEach { entry in
            if let worker = entry.worker {
                precondition(self.state.workers[worker]?.leases.contains(entry.id) == true, "a lease its worker lost")
            } else {
                queued += 1
                byKind[entry.envelope.kind, default: 0] += 1
            }
        }
        precondition(queued == self.state.queueDepth, "queue depth \(self.state.queueDepth), \(queued) queued")
        let counters = self.state.counters
        precondition(
            counters.submitted + counters.recovered
                == counters.resultsCompleted + counters.resultsFailed + counters.resultsCancelled + self.state.inFlight,
            "the task counters do not reconcile: \(counters), \(self.state.inFlight) in flight"
        )
        precondition(byKind == self.state.depthByKind, "depth by kind \(self.state.depthByKind), \(byKind) queued")
        // The snapshot agrees, and no queued task is older than the time the fuzzer has let pass.
        for (kind, figures) in self.state.kindFigures(now: self.now) {
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
        precondition(self.state.endedJobs.count <= BrokerState.endedJobsKept)
        for (id, worker) in self.state.workers {
            for lease in worker.leases {
                // A cancelled task (or a lost coordinator's) is gone from the table while its worker
                // still runs it: the slot stays taken until its RESULT comes.
                precondition(
                    self.state.tasks[lease].map { $0.worker == id } ?? true,
                    "a worker holds a task leased elsewhere"
                )
            }
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
        let data: UnsafeRawBufferPointer
        var offset = 0

        init(_ data: UnsafeRawBufferPointer) { self.data = data }

        mutating func byte() -> UInt8? {
            guard self.offset < self.data.count else { return nil }
            defer { self.offset += 1 }
            return self.data[self.offset]
        }

        mutating func frames() -> [[UInt8]] {
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
        return [
            "flow": flow,
            "results-in-batch": message(0, ready) + message(4, submits[0]) + message(4, submits[1])
                + message(0, WireMessage.batch(Array(results[0..<2])).encode()),
            "lost-worker": message(0, ready) + message(4, submits[5]) + [4, 60, 4, 60],
            "zap": zapSeed,
            "journal-record": journalSeed,
        ]
    }
}
