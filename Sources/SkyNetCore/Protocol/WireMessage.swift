/// A whole protocol message (the frames after a ROUTER's routing-id frame), decoded and validated.
///
/// Frame layouts:
///
/// | command | frames after the header |
/// |---|---|
/// | READY | ``ReadyInfo`` |
/// | HEARTBEAT, CANCEL, ACCEPTED | none |
/// | DISCONNECT, REJECTED | reason text (UTF-8, may be empty) |
/// | SUBMIT, TASK | ``TaskEnvelope``, input bytes |
/// | RESULT | ``ResultMeta``, output bytes (completed) or error text (otherwise, UTF-8) |
/// | PROGRESS | payload bytes |
/// | STATUS | request (arg 0): none; reply (arg 1): a JSON document (UTF-8) |
/// | SUBMIT with the detached flag | ``TaskEnvelope``, input bytes, job id (16 bytes) |
/// | JOB query (arg 1) | job id, flags (1 byte; bit 0: follow) |
/// | JOB cancel (arg 2) | job id |
/// | JOB reply (arg 3) | job id, a JSON document (UTF-8, ``DetachedJobStatus``) |
/// | JOB result (arg 4) | job id, RESULT header, ``ResultMeta``, body, task kind (UTF-8), task input |
/// | BATCH | the messages, packed (``Batch``) |
package enum WireMessage: Sendable, Equatable {
    case ready(capacity: UInt32, ReadyInfo)
    /// From the broker it also carries its heartbeat interval (0 from the others, and from brokers
    /// before 0.9): peers wait `liveness` intervals of the broker's own before they call it lost.
    case heartbeat(epoch: UInt32, intervalMilliseconds: UInt32 = 0)
    /// A worker's own figures, sent with each heartbeat.
    case figures(WorkerFigures)
    /// A coordinator's running job, sent with each heartbeat and when the job ends (FIGURES, arg 1).
    case jobFigures(JobFigures)
    case disconnect(DisconnectReason, text: String)
    case submit(TaskID, attempt: UInt32, TaskEnvelope, input: [UInt8])
    case accepted(TaskID, attempt: UInt32, requeued: Bool)
    /// First ACCEPTEDs of several tasks in one message (2...``ProtocolLimits/acceptedListMost``), sent
    /// only to a coordinator whose SUBMITs carry ``Header/readsAcceptedListsFlag``.
    case acceptedList([AcceptedTask])
    case rejected(TaskID, RejectReason, text: String)
    case task(TaskID, attempt: UInt32, TaskEnvelope, input: [UInt8])
    case result(TaskID, attempt: UInt32, ResultStatus, ResultMeta, body: [UInt8])
    case progress(TaskID, attempt: UInt32, payload: [UInt8])
    case cancel(TaskID)
    case statusRequest
    case statusReply(json: String)
    /// A SUBMIT for a detached job (durable brokers only): the job, not the sender, owns the task.
    case submitToJob(TaskID, attempt: UInt32, TaskEnvelope, input: [UInt8], job: TaskID)
    /// Asks for a detached job's results so far (and, with `follow`, the rest as they come).
    case jobQuery(job: TaskID, follow: Bool)
    /// Cancels a detached job's unfinished tasks.
    case jobCancel(job: TaskID)
    /// Names a detached job (sent by its submitter once the broker holds the job).
    case jobName(job: TaskID, name: String)
    /// The broker's account of a job (``DetachedJobStatus`` as JSON).
    case jobReply(job: TaskID, json: String)
    /// One final result of a detached job's task, with the task's kind and input.
    case jobResult(
        job: TaskID,
        TaskID,
        attempt: UInt32,
        ResultStatus,
        ResultMeta,
        body: [UInt8],
        kind: String,
        input: [UInt8]
    )
    /// Several messages for one peer (each its frames, header first), to be decoded one by one.
    case batch([[[UInt8]]])

    /// About how many bytes the message takes, when it is one that ``Batch/Writer/append(_:)`` writes
    /// from its parts (nil for the others, which are encoded first).
    package var directSize: Int? {
        switch self {
        case .submit(_, _, let envelope, let input), .task(_, _, let envelope, let input):
            return Self.taskSize(kind: envelope.kind, inputCount: input.count)
        case .result(_, _, _, let meta, let body):
            return Self.resultSize(meta, bodyCount: body.count)
        case .heartbeat, .accepted, .cancel:
            return Header.size + 8
        default:
            return nil
        }
    }

    /// A SUBMIT's or TASK's ``directSize``, for a sender that writes one without making the message.
    package static func taskSize(kind: String, inputCount: Int) -> Int {
        Header.size + 32 + kind.utf8.count + inputCount
    }

    /// A RESULT's ``directSize``, for a sender that writes one without making the message.
    package static func resultSize(_ meta: ResultMeta, bodyCount: Int) -> Int {
        Header.size + 32 + meta.system.utf8.count + bodyCount
    }

    /// The frames of this message, header first.
    package func encode() -> [[UInt8]] {
        switch self {
        case .ready(let capacity, let info):
            return [Header(.ready, arg: capacity).encode(), info.encode()]
        case .heartbeat(let epoch, let interval):
            return [Header(.heartbeat, arg: epoch, attempt: interval).encode()]
        case .figures(let figures):
            return [Header(.figures).encode(), figures.encode()]
        case .jobFigures(let figures):
            return [Header(.figures, arg: 1).encode(), figures.encode()]
        case .disconnect(let reason, let text):
            return [Header(.disconnect, arg: reason.rawValue).encode(), Array(text.utf8)]
        case .submit(let id, let attempt, let envelope, let input):
            return [Header(.submit, attempt: attempt, taskID: id).encode(), envelope.encode(), input]
        case .accepted(let id, let attempt, let requeued):
            return [Header(.accepted, flags: requeued ? Header.requeuedFlag : 0, attempt: attempt, taskID: id).encode()]
        case .acceptedList(let tasks):
            let first = tasks.first ?? AcceptedTask(.zero, attempt: 0)
            var more = [UInt8](repeating: 0, count: Swift.max(tasks.count - 1, 0) * AcceptedTask.size)
            more.withUnsafeMutableBytes { out in
                for (index, task) in tasks.dropFirst().enumerated() {
                    task.write(into: out, at: index * AcceptedTask.size)
                }
            }
            return [
                Header(.accepted, flags: Header.acceptedListFlag, attempt: first.attempt, taskID: first.id).encode(),
                more,
            ]
        case .rejected(let id, let reason, let text):
            return [Header(.rejected, arg: reason.rawValue, taskID: id).encode(), Array(text.utf8)]
        case .task(let id, let attempt, let envelope, let input):
            return [Header(.task, attempt: attempt, taskID: id).encode(), envelope.encode(), input]
        case .result(let id, let attempt, let status, let meta, let body):
            return [Header(.result, arg: status.rawValue, attempt: attempt, taskID: id).encode(), meta.encode(), body]
        case .progress(let id, let attempt, let payload):
            return [Header(.progress, attempt: attempt, taskID: id).encode(), payload]
        case .cancel(let id):
            return [Header(.cancel, taskID: id).encode()]
        case .statusRequest:
            return [Header(.status, arg: 0).encode()]
        case .statusReply(let json):
            return [Header(.status, arg: 1).encode(), Array(json.utf8)]
        case .submitToJob(let id, let attempt, let envelope, let input, let job):
            return [
                Header(.submit, flags: Header.detachedFlag, attempt: attempt, taskID: id).encode(), envelope.encode(),
                input, job.bytes,
            ]
        case .jobQuery(let job, let follow):
            return [Header(.job, arg: JobOp.query.rawValue).encode(), job.bytes, [follow ? 1 : 0]]
        case .jobCancel(let job):
            return [Header(.job, arg: JobOp.cancel.rawValue).encode(), job.bytes]
        case .jobName(let job, let name):
            return [Header(.job, arg: JobOp.name.rawValue).encode(), job.bytes, Array(name.utf8)]
        case .jobReply(let job, let json):
            return [Header(.job, arg: JobOp.reply.rawValue).encode(), job.bytes, Array(json.utf8)]
        case .jobResult(let job, let id, let attempt, let status, let meta, let body, let kind, let input):
            return [
                Header(.job, arg: JobOp.result.rawValue).encode(), job.bytes,
                Header(.result, arg: status.rawValue, attempt: attempt, taskID: id).encode(), meta.encode(), body,
                Array(kind.utf8), input,
            ]
        case .batch(let messages):
            var writer = Batch.Writer()
            for frames in messages { writer.append(frames) }
            return writer.frames()
        }
    }

    /// The frames of one message read in place, header first: valid only while what holds them is.
    package typealias RawFrames = UnsafeBufferPointer<UnsafeRawBufferPointer>

    /// Decodes and validates the frames of one message, header first.
    /// - Throws: ``ProtocolError`` with the reason; nothing here traps on any input.
    package static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> WireMessage {
        try self.withRawFrames(frames) { raw throws(ProtocolError) in try self.decode(raw) }
    }

    /// Decodes a message packed in a BATCH, read in place.
    package static func decode(_ packed: Batch.Packed) throws(ProtocolError) -> WireMessage {
        try packed.withFrames { frames throws(ProtocolError) in try self.decode(frames) }
    }

    /// Calls `body` with the bytes of each of `frames` (at most ``Batch/maxFramesPerMessage`` deep
    /// for a message from the network; any count works).
    package static func withRawFrames<R>(
        _ frames: [[UInt8]],
        _ body: (RawFrames) throws(ProtocolError) -> R
    ) throws(ProtocolError) -> R {
        let result = withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: frames.count) {
            raw -> Result<R, ProtocolError> in
            func nest(_ index: Int) -> Result<R, ProtocolError> {
                guard index < frames.count else {
                    return Result { () throws(ProtocolError) -> R in try body(UnsafeBufferPointer(raw)) }
                }
                return frames[index].withUnsafeBytes { bytes in
                    raw.initializeElement(at: index, to: bytes)
                    return nest(index + 1)
                }
            }
            return nest(0)
        }
        return try result.get()
    }

    /// A SUBMIT or TASK's frames checked (their count, the attempt) and its envelope decoded, for
    /// ``decode(_:)`` and ``taskParts(_:_:)`` alike.
    private static func taskFrames(
        _ frames: RawFrames,
        _ header: Header,
        detached: Bool,
        previousKind: inout String?
    ) throws(ProtocolError) -> TaskEnvelope {
        guard frames.count == (detached ? 4 : 3) else {
            throw ProtocolError(
                .badFrameCount,
                "\(header.command) has \(frames.count) frames, expected \(detached ? 4 : 3)"
            )
        }
        let envelope = try TaskEnvelope.decode(frames[1], previousKind: &previousKind)
        guard header.attempt >= 1 else { throw ProtocolError(.invalidValue, "\(header.command) attempt is 0") }
        return envelope
    }

    /// A SUBMIT (to its coordinator's own tasks, not a detached job) or a TASK, whichever `command`
    /// says, read in place: its id, attempt and envelope, and its input as the frame itself (valid
    /// while the frames are), validated as ``decode(_:)`` does; nil for any other message. The broker
    /// keeps a SUBMIT's input its own way (``TaskBytes``), and a worker scans a TASK's where it lies,
    /// instead of each making an array of it.
    package static func taskParts(
        _ frames: RawFrames,
        _ command: Command
    ) throws(ProtocolError) -> (id: TaskID, attempt: UInt32, envelope: TaskEnvelope, input: UnsafeRawBufferPointer)? {
        var previousKind: String?
        var parts: (id: TaskID, attempt: UInt32, envelope: TaskEnvelope, input: UnsafeRawBufferPointer)?
        _ = try Self.readTask(frames, command, previousKind: &previousKind) { id, attempt, envelope, input in
            parts = (id, attempt, envelope, input)
            return true
        }
        return parts
    }

    /// ``taskParts(_:_:)`` handed straight to `task`, its kind taken from `previousKind` when it is
    /// the same (see ``TaskEnvelope/decode(_:previousKind:)``) and left there for the next. Returns
    /// what `task` returns, or nil when the message is not one (then `task` was not called). Handed
    /// over rather than returned: the optional of the parts was destroyed through its type metadata
    /// in the caller, ~150 instructions a task on the broker and on the worker.
    package static func readTask(
        _ frames: RawFrames,
        _ command: Command,
        previousKind: inout String?,
        _ task: (TaskID, UInt32, TaskEnvelope, UnsafeRawBufferPointer) -> Bool
    ) throws(ProtocolError) -> Bool? {
        guard let first = frames.first else { throw ProtocolError(.badFrameCount, "empty message") }
        let header = try Header.decode(first)
        guard header.command == command else { return nil }
        switch command {
        case .task: break
        case .submit where header.flags & Header.detachedFlag == 0: break
        default: return nil  // a detached job's SUBMIT, or a command that carries no task
        }
        let envelope = try Self.taskFrames(frames, header, detached: false, previousKind: &previousKind)
        return task(header.taskID, header.attempt, envelope, frames[2])
    }

    /// Reads one message in place when it is the kind its caller reads so (the broker's SUBMITs, a
    /// worker's TASKs, a coordinator's RESULTs): returns what its handler returned (false stops), or
    /// nil when the message is not one it reads (then it is decoded). It throws when the message is
    /// one it reads but bad, as ``decode(_:)`` would.
    package typealias InPlaceReader = (RawFrames) throws(ProtocolError) -> Bool?

    /// A message packed in a BATCH: handed to `read` in place, or, when `read` does not read it,
    /// decoded and handed to `body` (as its error when it does not decode, or when `read` threw).
    /// Returns what the one called returns. Not generic, and here: called from another module, the
    /// generic `withFrames` would not be specialized (a metadata lookup per message, ~1,300
    /// instructions).
    package static func visit(
        _ packed: Batch.Packed,
        read: InPlaceReader,
        _ body: (Result<WireMessage, ProtocolError>) -> Bool
    ) -> Bool {
        packed.withFrames { frames in
            do throws(ProtocolError) {
                if let going = try read(frames) { return going }
            } catch {
                return body(.failure(error))
            }
            return body(Result { () throws(ProtocolError) -> WireMessage in try self.decode(frames) })
        }
    }

    /// Decodes and validates the frames of one message, header first, read in place.
    /// - Throws: ``ProtocolError`` with the reason; nothing here traps on any input.
    package static func decode(_ frames: RawFrames) throws(ProtocolError) -> WireMessage {
        guard let first = frames.first else { throw ProtocolError(.badFrameCount, "empty message") }
        if Batch.Form.of(first: first, frames: frames.count) == .oneFrame {
            let (head, packed) = Batch.split(oneFrame: first)
            return .batch(try Batch.unpack(packed, count: try Header.decode(head).arg))
        }
        let header = try Header.decode(first)
        func expectFrames(_ count: Int) throws(ProtocolError) {
            guard frames.count == count else {
                throw ProtocolError(
                    .badFrameCount,
                    "\(header.command) has \(frames.count) frames, expected \(count)"
                )
            }
        }
        func text(
            _ index: Int,
            _ field: String,
            limit: Int = ProtocolLimits.textLength
        ) throws(ProtocolError) -> String {
            guard frames[index].count <= limit else {
                throw ProtocolError(.badLength, "\(field) is \(frames[index].count) bytes, at most \(limit)")
            }
            return try ByteDecoding.utf8(frames[index], field: field)
        }
        switch header.command {
        case .ready:
            try expectFrames(2)
            guard header.arg >= 1, header.arg <= 4096 else {
                throw ProtocolError(.invalidValue, "READY capacity \(header.arg) is outside 1...4096")
            }
            return .ready(capacity: header.arg, try ReadyInfo.decode(frames[1]))
        case .heartbeat:
            try expectFrames(1)
            return .heartbeat(epoch: header.arg, intervalMilliseconds: header.attempt)
        case .figures:
            try expectFrames(2)
            switch header.arg {
            case 0: return .figures(try WorkerFigures.decode(frames[1]))
            case 1: return .jobFigures(try JobFigures.decode(frames[1]))
            default: throw ProtocolError(.invalidValue, "FIGURES of kind \(header.arg) is unknown")
            }
        case .disconnect:
            try expectFrames(2)
            guard let reason = DisconnectReason(rawValue: header.arg) else {
                throw ProtocolError(.invalidValue, "DISCONNECT reason \(header.arg) is unknown")
            }
            return .disconnect(reason, text: try text(1, "DISCONNECT reason"))
        case .submit, .task:
            let detached = header.command == .submit && header.flags & Header.detachedFlag != 0
            var previousKind: String?
            let envelope = try Self.taskFrames(frames, header, detached: detached, previousKind: &previousKind)
            let input = Array(frames[2])
            if detached {
                let job = try jobID(frames[3])
                return .submitToJob(header.taskID, attempt: header.attempt, envelope, input: input, job: job)
            }
            return header.command == .submit
                ? .submit(header.taskID, attempt: header.attempt, envelope, input: input)
                : .task(header.taskID, attempt: header.attempt, envelope, input: input)
        case .accepted:
            // The one check of an ACCEPTED is the in-place reader's (a coordinator's fast path runs it alone).
            let view = try AcceptedView(accepted: frames)
            guard view.isList else { return .accepted(view.taskID, attempt: view.attempt, requeued: view.requeued) }
            var tasks: [AcceptedTask] = []
            view.forEach { tasks.append(AcceptedTask($0, attempt: $1)) }
            return .acceptedList(tasks)
        case .rejected:
            try expectFrames(2)
            guard let reason = RejectReason(rawValue: header.arg) else {
                throw ProtocolError(.invalidValue, "REJECTED reason \(header.arg) is unknown")
            }
            return .rejected(header.taskID, reason, text: try text(1, "REJECTED reason"))
        case .result:
            // The one check of a RESULT is the in-place reader's (the broker's fast path runs it alone).
            let view = try ResultView(result: frames)
            return .result(
                view.taskID,
                attempt: view.attempt,
                view.status,
                ResultView.meta(of: frames),
                body: Array(frames[2])
            )
        case .progress:
            try expectFrames(2)
            return .progress(header.taskID, attempt: header.attempt, payload: Array(frames[1]))
        case .cancel:
            try expectFrames(1)
            return .cancel(header.taskID)
        case .status:
            switch header.arg {
            case 0:
                try expectFrames(1)
                return .statusRequest
            case 1:
                try expectFrames(2)
                return .statusReply(json: try ByteDecoding.utf8(frames[1], field: "STATUS reply"))
            default:
                throw ProtocolError(.invalidValue, "STATUS arg \(header.arg) is neither request nor reply")
            }
        case .job:
            guard let op = JobOp(rawValue: header.arg) else {
                throw ProtocolError(.invalidValue, "JOB operation \(header.arg) is unknown")
            }
            switch op {
            case .query:
                try expectFrames(3)
                guard frames[2].count == 1, frames[2][0] <= 1 else {
                    throw ProtocolError(.invalidValue, "JOB query flags must be one byte, 0 or 1")
                }
                return .jobQuery(job: try jobID(frames[1]), follow: frames[2][0] == 1)
            case .cancel:
                try expectFrames(2)
                return .jobCancel(job: try jobID(frames[1]))
            case .name:
                try expectFrames(3)
                let name = try text(2, "job name")
                guard !name.isEmpty, name.utf8.count <= ProtocolLimits.nameLength else {
                    throw ProtocolError(.invalidValue, "job name must be 1 to \(ProtocolLimits.nameLength) bytes")
                }
                return .jobName(job: try jobID(frames[1]), name: name)
            case .reply:
                try expectFrames(3)
                return .jobReply(
                    job: try jobID(frames[1]),
                    json: try ByteDecoding.utf8(frames[2], field: "JOB reply")
                )
            case .result:
                try expectFrames(7)
                let job = try jobID(frames[1])
                guard
                    case .result(let id, let attempt, let status, let meta, let body) = try self.decode(
                        RawFrames(rebasing: frames[2...4])
                    )
                else {
                    throw ProtocolError(.invalidValue, "JOB result does not hold a RESULT")
                }
                let kind = try text(5, "task kind")
                guard !kind.isEmpty else { throw ProtocolError(.invalidValue, "task kind is empty") }
                return .jobResult(
                    job: job,
                    id,
                    attempt: attempt,
                    status,
                    meta,
                    body: body,
                    kind: kind,
                    input: Array(frames[6])
                )
            }
        case .batch:
            try expectFrames(2)
            return .batch(try Batch.unpack(frames[1], count: header.arg))
        }
    }

    private static func jobID(_ bytes: UnsafeRawBufferPointer) throws(ProtocolError) -> TaskID {
        guard bytes.count == 16 else {
            throw ProtocolError(.badLength, "job id is \(bytes.count) bytes, expected 16")
        }
        let id = TaskID(bytes: Array(bytes))
        guard id != .zero else { throw ProtocolError(.badTaskID, "job id is zero") }
        return id
    }
}

/// The operations of the JOB command (its header's arg).
package enum JobOp: UInt32 {
    case query = 1
    case cancel = 2
    case reply = 3
    case result = 4
    case name = 5
}

extension WireMessage {
    /// The command's name, for logs and errors.
    package var commandName: String {
        switch self {
        case .ready: "READY"
        case .heartbeat: "HEARTBEAT"
        case .figures, .jobFigures: "FIGURES"
        case .disconnect: "DISCONNECT"
        case .submit: "SUBMIT"
        case .accepted, .acceptedList: "ACCEPTED"
        case .rejected: "REJECTED"
        case .task: "TASK"
        case .result: "RESULT"
        case .progress: "PROGRESS"
        case .cancel: "CANCEL"
        case .statusRequest, .statusReply: "STATUS"
        case .submitToJob: "SUBMIT"
        case .jobQuery, .jobCancel, .jobName, .jobReply, .jobResult: "JOB"
        case .batch: "BATCH"
        }
    }
}
