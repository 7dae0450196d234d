import Glibc
import Testing

@testable import SkyNet
@testable import SkyNetCore

@Suite("Wire protocol v1")
struct ProtocolTests {
    static let id = TaskID(high: 0x0123_4567_89AB_4DEF, low: 0x8123_4567_89AB_CDEF)
    static let envelope = TaskEnvelope(
        kind: "sector",
        priority: -3,
        timeoutMilliseconds: 30_000,
        maxAttempts: 3,
        flags: 1
    )
    static let info = ReadyInfo(
        name: "worker-a",
        kinds: ["sector", "echo"],
        heartbeatMilliseconds: 1000,
        version: "0.1.0"
    )
    static let meta = ResultMeta(system: "worker-b", durationMicroseconds: 1234, slot: 2, busy: 3)

    static let everyCommand: [WireMessage] = [
        .ready(capacity: 4, info),
        .heartbeat(epoch: 77),
        .figures(
            WorkerFigures(
                running: 3,
                done: 1_000_000,
                failed: 7,
                residentBytes: 52_428_800,
                cpuSeconds: 12.5,
                host: "h1"
            )
        ),
        .jobFigures(
            JobFigures(
                serial: 2,
                name: "exec gzip {}",
                tasks: 100,
                completed: 90,
                failed: 2,
                cancelled: 1,
                fromCache: 40,
                retried: 3,
                elapsedSeconds: 12.345,
                deadLetters: [
                    .init(task: "\(id)", error: "exit 1"), .init(task: "\(TaskID.zero)", error: "ünïcode"),
                ]
            )
        ),
        .jobFigures(JobFigures(serial: 0, name: "", tasks: 0, completed: 0, failed: 0, cancelled: 0)),
        .disconnect(.draining, text: "bye"),
        .disconnect(.unknownPeer, text: ""),
        .submit(id, attempt: 1, envelope, input: [1, 2, 3]),
        .submit(id, attempt: 2, envelope, input: []),
        .accepted(id, attempt: 1, requeued: false),
        .accepted(id, attempt: 2, requeued: true),
        .acceptedList([AcceptedTask(id, attempt: 1), AcceptedTask(TaskID(high: 7, low: 8), attempt: 3)]),
        .acceptedList(
            (1...ProtocolLimits.acceptedListMost).map { AcceptedTask(TaskID(high: 1, low: UInt64($0)), attempt: 1) }
        ),
        .rejected(id, .queueFull, text: "queue full"),
        .task(id, attempt: 3, envelope, input: Array(repeating: 9, count: 5000)),
        .result(id, attempt: 1, .completed, meta, body: Array("sector 9: 3 signals".utf8)),
        .result(id, attempt: 2, .failed, meta, body: Array("UnreliableAPI".utf8)),
        .result(id, attempt: 2, .timedOut, meta, body: Array("timed out".utf8)),
        .result(id, attempt: 2, .cancelled, meta, body: []),
        .progress(id, attempt: 1, payload: [0, 50]),
        .cancel(id),
        .statusRequest,
        .statusReply(json: "{\"workers\":[]}"),
        .submitToJob(id, attempt: 1, envelope, input: [4], job: TaskID(high: 5, low: 6)),
        .jobQuery(job: TaskID(high: 5, low: 6), follow: true),
        .jobQuery(job: TaskID(high: 5, low: 6), follow: false),
        .jobCancel(job: TaskID(high: 5, low: 6)),
        .jobName(job: TaskID(high: 5, low: 6), name: "nightly-build"),
        .jobReply(job: TaskID(high: 5, low: 6), json: "{\"pending\":0}"),
        .jobResult(
            job: TaskID(high: 5, low: 6),
            id,
            attempt: 2,
            .completed,
            meta,
            body: Array("sector 9: 3 signals".utf8),
            kind: "sector",
            input: [9, 0, 0, 0, 0, 0, 0, 0]
        ),
        .jobResult(job: TaskID(high: 5, low: 6), id, attempt: 3, .failed, meta, body: [], kind: "k", input: []),
        .batch([WireMessage.cancel(id).encode()]),
        .batch([
            WireMessage.task(id, attempt: 1, envelope, input: [1, 2]).encode(),
            WireMessage.heartbeat(epoch: 3).encode(),
            WireMessage.result(id, attempt: 1, .completed, meta, body: []).encode(),
        ]),
    ]

    @Test("every command survives an encode/decode round trip", arguments: everyCommand)
    func roundTrip(_ message: WireMessage) throws {
        let frames = message.encode()
        #expect(frames[0].count == Header.size)
        #expect(try WireMessage.decode(frames) == message)
    }

    @Test("a BATCH as one frame (its header, then the packed messages) decodes as the two-frame one; its form is told")
    func oneFrameBatch() throws {
        let inner: [WireMessage] = [.cancel(TaskID(high: 3, low: 4)), .heartbeat(epoch: 7)]
        var writer = Batch.Writer()
        for message in inner { writer.append(message.encode()) }
        let two = writer.frames()
        let one = [two[0] + two[1]]
        #expect(try WireMessage.decode(one) == WireMessage.decode(two))
        #expect(try WireMessage.decode(one) == .batch(inner.map { $0.encode() }))
        func form(_ frames: [[UInt8]]) -> Batch.Form {
            frames[0].withUnsafeBytes { Batch.Form.of(first: $0, frames: frames.count) }
        }
        #expect(form(two) == .twoFrames(senderReadsOneFrame: true))
        #expect(form([Header(.batch, arg: 2).encode(), two[1]]) == .twoFrames(senderReadsOneFrame: false))
        #expect(form(one) == .oneFrame)
        // A header-sized frame alone, or a longer first frame with more after it, is no BATCH (and
        // decodes to an error); nor is a message of another command with a long first frame.
        #expect(form([two[0]]) == .notBatch && form(one + [[1]]) == .notBatch)
        #expect(throws: ProtocolError.self) { try WireMessage.decode([two[0]]) }
        #expect(throws: ProtocolError.self) { try WireMessage.decode(one + [[1]]) }
        var cancel = WireMessage.cancel(TaskID(high: 3, low: 4)).encode()
        cancel[0] += [0]
        #expect(form(cancel) == .notBatch)
        // A one-frame BATCH's header is checked like any other; a one-frame BATCH inside is refused.
        var badVersion = one
        badVersion[0][2] = 9
        #expect(throws: ProtocolError.self) { try WireMessage.decode(badVersion) }
        var nested = Batch.Writer()
        nested.append(one)
        #expect(throws: ProtocolError.self) { try WireMessage.decode(nested.frames()) }
    }

    @Test("an ACCEPTED list written into a BATCH is the one the encoder makes, and reads back in place")
    func acceptedListInPlace() throws {
        let tasks = (1...3).map { AcceptedTask(TaskID(high: 9, low: UInt64($0)), attempt: UInt32($0)) }
        var writer = Batch.Writer()
        writer.appendAcceptedList(count: tasks.count) { tasks[$0] }
        var encoded = Batch.Writer()
        encoded.append(WireMessage.acceptedList(tasks).encode())
        #expect(writer.bytes == encoded.bytes && writer.count == 1)
        var read: [AcceptedTask] = []
        var list = false
        try writer.bytes.withUnsafeBytes { bytes in
            try Batch.forEach(bytes, count: 1) { packed in
                packed.withFrames { frames in
                    guard let view = try? AcceptedView(frames) else { return }
                    list = view.isList
                    view.forEach { read.append(AcceptedTask($0, attempt: $1)) }
                }
            }
        }
        #expect(list && read == tasks)
    }

    @Test("the header is 32 bytes: magic, version, command, flags, arg, attempt, task id")
    func headerLayout() throws {
        let bytes = Header(.result, flags: 0x0102, arg: 0x0304_0506, attempt: 7, taskID: Self.id).encode()
        #expect(bytes.count == 32)
        #expect(Array(bytes[0..<4]) == [UInt8(ascii: "S"), UInt8(ascii: "N"), 1, Command.result.rawValue])
        #expect(Array(bytes[4..<8]) == [0x02, 0x01, 0, 0])
        #expect(Array(bytes[8..<12]) == [0x06, 0x05, 0x04, 0x03])
        #expect(Array(bytes[12..<16]) == [7, 0, 0, 0])
        #expect(Array(bytes[16..<32]) == Self.id.bytes)
        #expect(
            try Header.decode(bytes) == Header(.result, flags: 0x0102, arg: 0x0304_0506, attempt: 7, taskID: Self.id)
        )
        // Written into a buffer that held other bytes (the outbox's, on its stack), it is the same
        // 32 bytes, reserved ones included; framed, after its length.
        for framed in [false, true] {
            var buffer = [UInt8](repeating: 0xAB, count: 40)
            let count = buffer.withUnsafeMutableBytes {
                Header(.result, flags: 0x0102, arg: 0x0304_0506, attempt: 7, taskID: Self.id).write(
                    into: $0,
                    framed: framed
                )
            }
            #expect(Array(buffer[..<count]) == (framed ? [32, 0, 0, 0] : []) + bytes)
            #expect(buffer[count...].allSatisfy { $0 == 0xAB })
        }
    }

    static func header(_ mutate: (inout [UInt8]) -> Void) -> [[UInt8]] {
        var frames = WireMessage.heartbeat(epoch: 1).encode()
        mutate(&frames[0])
        return frames
    }

    static let malformed: [(String, [[UInt8]], ProtocolError.Code)] = {
        var cases: [(String, [[UInt8]], ProtocolError.Code)] = [
            ("no frames", [], .badFrameCount),
            ("short header", header { $0.removeLast() }, .badHeaderLength),
            ("long header", header { $0.append(0) }, .badHeaderLength),
            ("empty header", [[]], .badHeaderLength),
            ("wrong magic", header { $0[0] = UInt8(ascii: "X") }, .badMagic),
            ("wrong version", header { $0[2] = 2 }, .badVersion),
            ("unknown command", header { $0[3] = 200 }, .unknownCommand),
            ("command zero", header { $0[3] = 0 }, .unknownCommand),
            ("reserved bits", header { $0[6] = 1 }, .reservedNotZero),
            ("task id on a connection command", header { $0[20] = 1 }, .badTaskID),
        ]
        let figures = WireMessage.figures(
            WorkerFigures(running: 1, done: 2, failed: 3, residentBytes: 4, cpuSeconds: 5)
        ).encode()
        cases.append(("FIGURES without its frame", [figures[0]], .badFrameCount))
        cases.append(("FIGURES truncated", [figures[0], Array(figures[1].dropLast())], .badLength))
        cases.append(("FIGURES with trailing bytes", [figures[0], figures[1] + [0]], .badLength))
        cases.append(("FIGURES version 2", [figures[0], [2] + figures[1].dropFirst()], .invalidValue))
        cases.append(("FIGURES of an unknown kind", [Header(.figures, arg: 7).encode(), figures[1]], .invalidValue))
        let jobFigures = WireMessage.jobFigures(
            JobFigures(serial: 1, name: "j", tasks: 1, completed: 1, failed: 0, cancelled: 0)
        ).encode()
        cases.append(("job FIGURES truncated", [jobFigures[0], Array(jobFigures[1].dropLast())], .badLength))
        var tooMany = jobFigures[1]
        tooMany[tooMany.count - 1] = 6
        cases.append(("job FIGURES with 6 dead letters", [jobFigures[0], tooMany], .invalidValue))
        cases.append(("job FIGURES as worker FIGURES", [figures[0], jobFigures[1]], .badLength))
        let ready = WireMessage.ready(capacity: 4, info).encode()
        cases.append(("READY without info", [ready[0]], .badFrameCount))
        cases.append(("READY with an extra frame", ready + [[]], .badFrameCount))
        cases.append(("READY capacity 0", [Header(.ready, arg: 0).encode(), ready[1]], .invalidValue))
        cases.append(("READY info truncated", [ready[0], Array(ready[1].dropLast())], .badLength))
        cases.append(("READY info with trailing bytes", [ready[0], ready[1] + [0]], .badLength))
        var badName = ready[1]
        badName[2] = 0xFF  // first byte of the name
        cases.append(("READY name not UTF-8", [ready[0], badName], .invalidUTF8))
        cases.append(
            (
                "READY heartbeat out of range",
                WireMessage.ready(
                    capacity: 4,
                    ReadyInfo(name: "w", kinds: ["k"], heartbeatMilliseconds: 1, version: "1")
                ).encode(),
                .invalidValue
            )
        )
        cases.append(
            (
                "READY with no kinds",
                WireMessage.ready(
                    capacity: 4,
                    ReadyInfo(name: "w", kinds: [], heartbeatMilliseconds: 1000, version: "1")
                ).encode(),
                .invalidValue
            )
        )
        var hugeLength = ready[1]
        hugeLength[0] = 0xFF
        hugeLength[1] = 0xFF
        cases.append(("READY name length beyond the frame", [ready[0], hugeLength], .badLength))
        let submit = WireMessage.submit(id, attempt: 1, envelope, input: [1]).encode()
        cases.append(("SUBMIT without input", Array(submit.prefix(2)), .badFrameCount))
        let job = TaskID(high: 1, low: 1)
        let detached = WireMessage.submitToJob(id, attempt: 1, envelope, input: [1], job: job).encode()
        cases.append(("detached SUBMIT without its job", Array(detached.prefix(3)), .badFrameCount))
        cases.append(("detached SUBMIT with a short job id", Array(detached.prefix(3)) + [[1, 2]], .badLength))
        cases.append(
            ("detached SUBMIT with a zero job id", Array(detached.prefix(3)) + [TaskID.zero.bytes], .badTaskID)
        )
        cases.append(("JOB with an unknown operation", [Header(.job, arg: 9).encode(), job.bytes], .invalidValue))
        cases.append(
            ("JOB query with bad flags", [Header(.job, arg: 1).encode(), job.bytes, [7]], .invalidValue)
        )
        cases.append(("JOB cancel with a task id", [Header(.job, arg: 2, taskID: id).encode(), job.bytes], .badTaskID))
        let jobResult = WireMessage.jobResult(
            job: job,
            id,
            attempt: 1,
            .failed,
            meta,
            body: [0xFF],
            kind: "k",
            input: []
        ).encode()
        cases.append(("JOB result with an error that is not UTF-8", jobResult, .invalidUTF8))
        var notResult = WireMessage.jobResult(
            job: job,
            id,
            attempt: 1,
            .completed,
            meta,
            body: [],
            kind: "k",
            input: []
        ).encode()
        notResult[2] = Header(.cancel, taskID: id).encode()
        cases.append(("JOB result holding a CANCEL", notResult, .badFrameCount))
        cases.append(
            ("SUBMIT with zero task id", [Header(.submit, attempt: 1).encode(), submit[1], submit[2]], .badTaskID)
        )
        cases.append(
            (
                "SUBMIT attempt 0", [Header(.submit, attempt: 0, taskID: id).encode(), submit[1], submit[2]],
                .invalidValue
            )
        )
        cases.append(("SUBMIT envelope truncated", [submit[0], Array(submit[1].prefix(5)), submit[2]], .badLength))
        cases.append(
            (
                "SUBMIT empty kind", WireMessage.submit(id, attempt: 1, TaskEnvelope(kind: ""), input: []).encode(),
                .invalidValue
            )
        )
        cases.append(
            (
                "SUBMIT max attempts 0",
                WireMessage.submit(id, attempt: 1, TaskEnvelope(kind: "k", maxAttempts: 0), input: []).encode(),
                .invalidValue
            )
        )
        var badKind = submit[1]
        badKind[2] = 0xC3  // a lone UTF-8 lead byte
        cases.append(("SUBMIT kind not UTF-8", [submit[0], badKind, submit[2]], .invalidUTF8))
        let result = WireMessage.result(id, attempt: 1, .failed, meta, body: []).encode()
        cases.append(
            (
                "RESULT unknown status",
                [Header(.result, arg: 9, attempt: 1, taskID: id).encode(), result[1], result[2]], .invalidValue
            )
        )
        cases.append(("RESULT error not UTF-8", [result[0], result[1], [0xFF, 0xFE]], .invalidUTF8))
        cases.append(("RESULT meta truncated", [result[0], [1], result[2]], .badLength))
        cases.append(("DISCONNECT unknown reason", [Header(.disconnect, arg: 99).encode(), []], .invalidValue))
        cases.append(("REJECTED unknown reason", [Header(.rejected, arg: 0, taskID: id).encode(), []], .invalidValue))
        cases.append(
            (
                "REJECTED text too long",
                [Header(.rejected, arg: 1, taskID: id).encode(), Array(repeating: 65, count: 5000)], .badLength
            )
        )
        cases.append(("STATUS odd arg", [Header(.status, arg: 7).encode()], .invalidValue))
        cases.append(("CANCEL with a payload", [Header(.cancel, taskID: id).encode(), [1]], .badFrameCount))
        let list = Header(.accepted, flags: Header.acceptedListFlag, attempt: 1, taskID: id).encode()
        let listed = AcceptedTask(TaskID(high: 3, low: 4), attempt: 2)
        var listedBytes = [UInt8](repeating: 0, count: AcceptedTask.size)
        listedBytes.withUnsafeMutableBytes { listed.write(into: $0, at: 0) }
        cases.append(
            ("ACCEPTED with a second frame", [Header(.accepted, taskID: id).encode(), listedBytes], .badFrameCount)
        )
        cases.append(("ACCEPTED list without its tasks' frame", [list], .badFrameCount))
        cases.append(("ACCEPTED list of no more tasks", [list, []], .badLength))
        cases.append(("ACCEPTED list cut short", [list, Array(listedBytes.dropLast())], .badLength))
        cases.append(
            (
                "ACCEPTED list over its limit",
                [list, Array(repeating: 1, count: ProtocolLimits.acceptedListMost * AcceptedTask.size)], .badLength
            )
        )
        cases.append(
            (
                "ACCEPTED list naming a task without an id", [list, listedBytes + [UInt8](repeating: 0, count: 20)],
                .badTaskID
            )
        )
        let requeuedList = Header(
            .accepted,
            flags: Header.acceptedListFlag | Header.requeuedFlag,
            attempt: 2,
            taskID: id
        ).encode()
        cases.append(("ACCEPTED list of requeued tasks", [requeuedList, listedBytes], .invalidValue))
        let batch = WireMessage.batch([WireMessage.cancel(id).encode(), WireMessage.statusRequest.encode()]).encode()
        cases.append(("BATCH count 0", [Header(.batch, arg: 0).encode(), []], .invalidValue))
        cases.append(("BATCH count too large", [Header(.batch, arg: 5000).encode(), batch[1]], .invalidValue))
        cases.append(("BATCH count above its messages", [Header(.batch, arg: 3).encode(), batch[1]], .badLength))
        cases.append(("BATCH count below its messages", [Header(.batch, arg: 1).encode(), batch[1]], .badLength))
        cases.append(("BATCH truncated", [batch[0], Array(batch[1].dropLast())], .badLength))
        cases.append(("BATCH without its frame", [batch[0]], .badFrameCount))
        var zeroFrames = batch[1]
        zeroFrames[0] = 0
        cases.append(("BATCH message of 0 frames", [batch[0], zeroFrames], .badFrameCount))
        var pastEnd = batch[1]
        pastEnd[1] = 0xFF
        pastEnd[4] = 0x7F
        cases.append(("BATCH length past the end", [batch[0], pastEnd], .badLength))
        cases.append(
            (
                "BATCH message without a header", [Header(.batch, arg: 1).encode(), [1, 3, 0, 0, 0, 1, 2, 3]],
                .badHeaderLength
            )
        )
        let nested = WireMessage.batch([WireMessage.statusRequest.encode()]).encode()
        cases.append(("BATCH inside a BATCH", WireMessage.batch([nested]).encode(), .invalidValue))
        return cases
    }()

    @Test("malformed input is rejected with a reason", arguments: malformed)
    func rejectsMalformed(_ name: String, _ frames: [[UInt8]], _ code: ProtocolError.Code) {
        #expect(throws: ProtocolError.self, "\(name)") { try WireMessage.decode(frames) }
        do {
            _ = try WireMessage.decode(frames)
        } catch {
            #expect(error.code == code, "\(name): \(error)")
            #expect(!error.detail.isEmpty)
        }
    }

    @Test("random and mutated frames never crash the decoder")
    func fuzz() {
        var rng = SplitMix64(seed: 42)
        var accepted = 0
        for round in 0..<20_000 {
            var frames: [[UInt8]]
            if round % 2 == 0, let base = Self.everyCommand.randomElement(using: &rng) {
                frames = base.encode()
                // Flip, drop or add bytes and frames.
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    let f = Int.random(in: 0..<frames.count, using: &rng)
                    switch Int.random(in: 0..<5, using: &rng) {
                    case 0 where !frames[f].isEmpty:
                        frames[f][Int.random(in: 0..<frames[f].count, using: &rng)] ^= UInt8.random(
                            in: 1...255,
                            using: &rng
                        )
                    case 1 where !frames[f].isEmpty: frames[f].removeLast()
                    case 2: frames[f].append(UInt8.random(in: 0...255, using: &rng))
                    case 3: frames.append([UInt8](repeating: 0, count: Int.random(in: 0...40, using: &rng)))
                    default: if frames.count > 1 { frames.removeLast() }
                    }
                }
            } else {
                frames = (0..<Int.random(in: 0...4, using: &rng)).map { _ in
                    (0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                }
            }
            if (try? WireMessage.decode(frames)) != nil { accepted += 1 }
        }
        // Some mutations (a flipped payload byte) are still valid messages; most are not.
        #expect(accepted < 10_000)
    }

    @Test("a BATCH holds whole messages, each decoded and validated on its own")
    func batchHoldsMessages() throws {
        let inner = [
            WireMessage.submit(Self.id, attempt: 1, Self.envelope, input: [7]),
            .cancel(Self.id),
            .result(Self.id, attempt: 2, .completed, Self.meta, body: Array(repeating: 1, count: 300)),
        ]
        guard case .batch(let messages) = try WireMessage.decode(WireMessage.batch(inner.map { $0.encode() }).encode())
        else {
            Issue.record("not a BATCH")
            return
        }
        #expect(try messages.map { try WireMessage.decode($0) } == inner)
        // A bad message inside is refused on its own: the framing around it holds.
        let bad = WireMessage.batch([[Header(.cancel).encode()], WireMessage.cancel(Self.id).encode()]).encode()
        guard case .batch(let parts) = try WireMessage.decode(bad) else {
            Issue.record("not a BATCH")
            return
        }
        #expect(throws: ProtocolError.self) { try WireMessage.decode(parts[0]) }
        #expect(try WireMessage.decode(parts[1]) == .cancel(Self.id))
    }

    @Test("RESULTs checked in place (the broker's BATCH path) agree with the full decoder")
    func resultViewAgreesWithDecode() throws {
        let good = WireMessage.result(Self.id, attempt: 2, .completed, Self.meta, body: [1, 2, 3]).encode()
        let failed = WireMessage.result(Self.id, attempt: 1, .failed, Self.meta, body: Array("boom".utf8)).encode()
        var badStatus = good
        badStatus[0] = Header(.result, arg: 9, attempt: 1, taskID: Self.id).encode()
        var cases: [[[UInt8]]] = [good, failed, badStatus]
        cases.append([good[0], good[1]])  // a frame short
        cases.append([good[0], Array(good[1].dropLast()), good[2]])  // meta truncated
        cases.append([good[0], good[1] + [0], good[2]])  // meta too long
        var badName = good[1]
        badName[2] = 0xC3  // a lone UTF-8 lead byte in the system name
        cases.append([good[0], badName, good[2]])
        cases.append([failed[0], failed[1], [0xFF, 0xFE]])  // error text not UTF-8
        cases.append([failed[0], failed[1], Array(repeating: 65, count: ProtocolLimits.errorLength + 1)])
        cases.append([failed[0], failed[1], Array(repeating: 65, count: ProtocolLimits.textLength + 1)])  // ok: detail
        cases.append([Header(.result, arg: 0, attempt: 1).encode(), good[1], good[2]])  // no task id
        for (index, frames) in cases.enumerated() {
            let packed = WireMessage.batch([frames]).encode()
            var inPlace: Result<ResultView?, ProtocolError>?
            try packed[1].withUnsafeBytes { bytes in
                try Batch.forEach(bytes, count: 1) { message in
                    inPlace = Result { () throws(ProtocolError) -> ResultView? in try ResultView(message) }
                }
            }
            let full = Result { () throws(ProtocolError) -> WireMessage in try WireMessage.decode(frames) }
            switch (inPlace, full) {
            case (.success(let view?), .success(.result(let id, let attempt, let status, _, _))):
                #expect(view.taskID == id && view.attempt == attempt && view.status == status, "case \(index)")
            case (.failure(let a), .failure(let b)):
                #expect(a.code == b.code, "case \(index): \(a) vs \(b)")
            default:
                Issue.record("case \(index): in place \(String(describing: inPlace)), full \(full)")
            }
        }
        // Not a RESULT: left to the full decoder.
        let cancel = WireMessage.batch([WireMessage.cancel(Self.id).encode()]).encode()
        try cancel[1].withUnsafeBytes { bytes in
            try Batch.forEach(bytes, count: 1) { message in
                let view = Result { () throws(ProtocolError) -> ResultView? in try ResultView(message) }
                if case .success(let result) = view { #expect(result == nil) } else { Issue.record("threw: \(view)") }
            }
        }
    }

    @Test("a TASK written straight into a BATCH is the TASK the encoder makes")
    func taskWrittenInPlace() throws {
        var writer = Batch.Writer()
        writer.appendTask(Self.id, attempt: 3, Self.envelope, input: [9, 8, 7])
        let expected = WireMessage.task(Self.id, attempt: 3, Self.envelope, input: [9, 8, 7])
        guard case .batch(let messages) = try WireMessage.decode(writer.frames()) else {
            Issue.record("not a BATCH")
            return
        }
        #expect(messages == [expected.encode()])
        #expect(try WireMessage.decode(messages[0]) == expected)
    }

    @Test(
        "TASKs and SUBMITs laid out on the stack are packed as encoded, for every kind length; envelopes read in place agree"
    )
    func tasksOfEveryKind() throws {
        for kind in [
            "s", "sector", "é-ü", String(repeating: "k", count: 64), String(repeating: "x", count: 65),
            String(repeating: "y", count: 300),
        ] {
            for input: [UInt8] in [
                [], [1, 2, 3], Array(repeating: 6, count: 256), Array(repeating: 5, count: 257),
                Array(repeating: 7, count: 5_000),
            ] {
                let envelope = TaskEnvelope(
                    kind: kind,
                    priority: -3,
                    timeoutMilliseconds: 250,
                    maxAttempts: 5,
                    flags: 1
                )
                for message in [
                    WireMessage.task(Self.id, attempt: 2, envelope, input: input),
                    WireMessage.submit(Self.id, attempt: 1, envelope, input: input),
                ] {
                    var direct = Batch.Writer()
                    direct.append(message)
                    var encoded = Batch.Writer()
                    encoded.append(message.encode())
                    #expect(direct.bytes == encoded.bytes, "\(kind.utf8.count)-byte kind, \(input.count)-byte input")
                }
                // A coordinator's first SUBMIT, written from its task: the same, but that it says its
                // sender reads ACCEPTED lists.
                let task = ScanTask(id: Self.id, attempt: 1, envelope: envelope, input: input)
                var fromTask = Batch.Writer()
                withUnsafePointer(to: task) { fromTask.appendSubmit($0) }
                var frames = WireMessage.submit(task.id, attempt: 1, task.envelope, input: input).encode()
                frames[0] = Header(.submit, flags: Header.readsAcceptedListsFlag, attempt: 1, taskID: task.id).encode()
                var submit = Batch.Writer()
                submit.append(frames)
                #expect(fromTask.bytes == submit.bytes && fromTask.count == 1)
                var writer = Batch.Writer()
                writer.appendTask(Self.id, attempt: 2, envelope, input: TaskBytes(input))
                #expect(writer.bytes.count == 1 + 36 + 4 + envelope.encodedSize + 4 + input.count)
                // The envelope read in place, with and without the kind of the task before.
                let bytes = envelope.encode()
                var previous: String?
                for _ in 0..<2 {
                    let read = bytes.withUnsafeBytes { raw in
                        Result { () throws(ProtocolError) -> TaskEnvelope in
                            try TaskEnvelope.decode(raw, previousKind: &previous)
                        }
                    }
                    let generic = Result { () throws(ProtocolError) -> TaskEnvelope in try TaskEnvelope.decode(bytes) }
                    #expect("\(read)" == "\(generic)")
                }
            }
        }
        // A kind that differs from the one before is read anew; bad envelopes fail as the decoder says.
        var previous: String? = "sector"
        let other = TaskEnvelope(kind: "other").encode()
        let read = other.withUnsafeBytes { raw in try? TaskEnvelope.decode(raw, previousKind: &previous) }
        #expect(read?.kind == "other" && previous == "other")
        for bad: [UInt8] in [
            [], [0, 0] + Array(repeating: 0, count: 12), [1, 0, 0xFF] + Array(repeating: 0, count: 12),
            [1, 0, 0x61] + Array(repeating: 0, count: 12), [1, 0, 0x61] + Array(repeating: 1, count: 13),
        ] {
            var none: String?
            let inPlace = bad.withUnsafeBytes { raw in
                Result { () throws(ProtocolError) -> TaskEnvelope in try TaskEnvelope.decode(raw, previousKind: &none) }
            }
            let generic = Result { () throws(ProtocolError) -> TaskEnvelope in try TaskEnvelope.decode(bad) }
            #expect("\(inPlace)" == "\(generic)", "\(bad)")
            if case .success = generic { Issue.record("\(bad) decoded") }
        }
    }

    @Test("RESULTs laid out on the stack are packed as encoded, for every name length and body size")
    func resultsOfEveryShape() throws {
        // The name of the system before, as a coordinator keeps it (``ResultView/system(of:previous:)``).
        var previous: String? = "w"
        for system in [
            "", "w", "vm-27064", "wörker-ü", String(repeating: "n", count: 128), String(repeating: "m", count: 129),
        ] {
            for body: [UInt8] in [[], [1], Array(repeating: 2, count: 256), Array(repeating: 3, count: 257)] {
                for status in [ResultStatus.completed, .failed] {
                    let meta = ResultMeta(system: system, durationMicroseconds: 0x0102_0304, slot: 513, busy: 7)
                    let message = WireMessage.result(Self.id, attempt: 4, status, meta, body: body)
                    var direct = Batch.Writer()
                    body.withUnsafeBytes { direct.appendResult(Self.id, attempt: 4, status, meta, body: $0) }
                    var encoded = Batch.Writer()
                    encoded.append(message.encode())
                    #expect(direct.bytes == encoded.bytes, "\(system.utf8.count)-byte name, \(body.count)-byte body")
                    #expect(direct.count == 1)
                    // The system read in place, taken from the one before or made anew, is the meta's
                    // (a name over the limit is the checks' to refuse).
                    guard system.utf8.count <= ProtocolLimits.nameLength else { continue }
                    let read = try WireMessage.withRawFrames(message.encode()) { raw throws(ProtocolError) in
                        _ = try ResultView(result: raw)
                        return ResultView.system(of: raw, previous: &previous)
                    }
                    #expect(read == system && previous == system)
                }
            }
        }
    }

    @Test(
        "a message written straight into a BATCH is packed as its encoded frames are",
        arguments: everyCommand.filter { if case .batch = $0 { false } else { true } }
    )
    func messageWrittenInPlace(_ message: WireMessage) throws {
        var direct = Batch.Writer()
        direct.append(message)
        var encoded = Batch.Writer()
        encoded.append(message.encode())
        #expect(direct.bytes == encoded.bytes)
        #expect(direct.count == 1)
        // The size the Outbox judges a message by is never below what it packs to.
        if let size = message.directSize {
            #expect(size >= message.encode().reduce(0) { $0 + $1.count })
        }
    }

    @Test("routing ids are unique and fit in libzmq's inline message storage (33 bytes)")
    func routingIDs() {
        let ids = (0..<1000).map { _ in PeerID.unique(prefix: "w") }
        #expect(Set(ids).count == ids.count)
        for id in ids.prefix(10) {
            #expect(id.bytes.count == 32)
            #expect(id.description.hasPrefix("w-"))
            #expect(id.bytes.dropFirst(2).allSatisfy { Array("0123456789abcdef".utf8).contains($0) })
        }
    }

    @Test("a string's UTF-8 read in place is its bytes, and a name is told equal to its bytes only")
    func utf8InPlace() {
        for text in ["", "w", "sector", "vm-27064-a-long-worker", "wörker-ü", String(repeating: "n", count: 300)] {
            #expect(text.withUTF8Bytes { Array($0) } == Array(text.utf8))
            Array(text.utf8).withUnsafeBytes { bytes in
                #expect(ByteDecoding.string(text, is: bytes))
                #expect(!ByteDecoding.string(text + "x", is: bytes))
                #expect(!ByteDecoding.string(String(text.dropLast()) + "#", is: bytes) || text.isEmpty)
            }
        }
    }

    @Test("decimal numbers written into bytes, as String(value) would write them")
    func decimals() {
        for value: Int64 in [0, 7, -7, 10, 99, 100, -1_000_001, 123_456_789, .max, .min] {
            var bytes: [UInt8] = Array("x=".utf8)
            bytes.appendDecimal(value)
            #expect(bytes == Array("x=\(value)".utf8))
            // Written into a buffer, after other bytes, as a printed result line writes it.
            let written = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { buffer in
                var at = 0
                buffer.write("x=", at: &at)
                buffer.writeDecimal(value, at: &at)
                return Array(buffer[..<at])
            }
            #expect(written == Array("x=\(value)".utf8))
        }
        for value: UInt64 in [0, 9, 1 << 32, .max] {
            var bytes: [UInt8] = []
            bytes.appendDecimal(value)
            #expect(bytes == Array(String(value).utf8))
        }
    }

    @Test("the UTF-8 check (ASCII eight bytes at a time) agrees with Swift's own validation")
    func utf8Check() {
        func swiftSays(_ bytes: [UInt8]) -> Bool { String(validating: bytes, as: UTF8.self) != nil }
        func check(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { ResultView.isUTF8($0) } }
        // Multi-byte characters and bad bytes at every offset around the 8-byte words, and every
        // length from empty to three words.
        let pieces: [[UInt8]] = [
            Array("é".utf8), Array("€".utf8), Array("😀".utf8), [0xFF], [0xC3], [0xE2, 0x82], [0x80],
            [0xED, 0xA0, 0x80],
        ]
        for length in 0...24 {
            let ascii = [UInt8](repeating: UInt8(ascii: "a"), count: length)
            #expect(check(ascii))
            for piece in pieces {
                for at in 0...length {
                    var bytes = ascii
                    bytes.insert(contentsOf: piece, at: at)
                    #expect(check(bytes) == swiftSays(bytes), "\(bytes)")
                }
            }
        }
        var random = SplitMix64(seed: 8)
        for _ in 0..<2000 {
            let bytes = (0..<Int(random.next() % 40)).map { _ in
                let byte = UInt8(truncatingIfNeeded: random.next())
                return random.next() % 4 == 0 ? byte : byte & 0x7F
            }
            #expect(check(bytes) == swiftSays(bytes), "\(bytes)")
        }
    }

    @Test("a worker's FIGURES read from /proc: fields counted as bytes, the memory VmRSS says")
    func processFigures() throws {
        // A command with spaces and parentheses: the fields count from after its last ")".
        let stat = Array("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 99 0 0 0 1234 56 0 0 20 0 9\n".utf8)
        #expect(WorkerFigures.cpuTicks(stat: stat) == 1234 + 56)
        #expect(WorkerFigures.cpuTicks(stat: Array("4242 (x) S 1 2".utf8)) == nil, "too few fields")
        #expect(WorkerFigures.cpuTicks(stat: Array("4242 x S".utf8)) == nil, "no command")
        let statm = Array("10811 2503 1642 254 0 1087 0\n".utf8)[...]
        #expect(WorkerFigures.decimalField(statm, 0) == 10811)
        #expect(WorkerFigures.decimalField(statm, 1) == 2503)
        #expect(WorkerFigures.decimalField(statm, 6) == 0)
        #expect(WorkerFigures.decimalField(statm, 7) == nil)
        #expect(WorkerFigures.decimalField(Array("1 -2 3".utf8)[...], 1) == nil, "not a number")
        #expect(WorkerFigures.decimalField(Array("  7  8\n".utf8)[...], 1) == 8, "runs of spaces")
        // This process, against what its status file says (kB, rounded): within a few MiB, since
        // the two reads are not at the same instant.
        let (resident, cpu) = WorkerFigures.process()
        let fd = open("/proc/self/status", O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        guard case .success(let bytes) = POSIX.readAll(fd) else {
            Issue.record("cannot read /proc/self/status")
            return
        }
        let status = String(decoding: bytes, as: UTF8.self)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        let kilobytes = try #require(line.split(separator: " ").dropFirst().first.flatMap { Int($0) })
        #expect(resident > 0 && abs(resident - kilobytes * 1024) < 8 << 20, "\(resident) against VmRSS \(kilobytes) kB")
        #expect(cpu >= 0)
    }

    @Test("text cut to a field's byte limit keeps whole characters")
    func utf8Prefix() {
        #expect("abc".prefix(utf8Bytes: 3) == "abc" && "abcd".prefix(utf8Bytes: 3) == "abc")
        #expect("aé".prefix(utf8Bytes: 3) == "aé", "a whole 2-byte character at the limit stays")
        #expect("aéb".prefix(utf8Bytes: 2) == "a", "a split one goes")
        #expect("€€".prefix(utf8Bytes: 5) == "€" && "€".prefix(utf8Bytes: 0) == "")
    }

    @Test("task ids print and parse as UUIDs")
    func taskIDText() {
        let id = Self.id
        #expect(id.description == "01234567-89ab-4def-8123-456789abcdef")
        #expect(TaskID(id.description) == id)
        #expect(TaskID("not a uuid") == nil)
        #expect(TaskID("01234567-89ab-4def-8123-456789abcdeg") == nil)
        let random = TaskID.random()
        #expect(random.description.count == 36)
        #expect(TaskID(random.description) == random)
    }
}

/// A small deterministic generator for fuzzing.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { self.state = seed }
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
