import Dispatch
import Glibc
import Synchronization

/// A journal error: the path cannot be opened or read (the broker does not start), or a write or
/// sync failed while it ran (the broker stops at once: ``Code/diskFailure``).
public struct JournalError: Error, Sendable, CustomStringConvertible {
    /// What went wrong; more codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The journal cannot be opened, read or locked (another broker holds it), or its writer
        /// thread cannot start: the broker does not start.
        public static let unavailable = Code(name: "unavailable")
        /// A write or sync failed while the broker ran. What is on disk is consistent up to the last
        /// commit and nothing after it was acknowledged; the broker has stopped (the `skynet broker`
        /// command exits 74, as sysexits' EX_IOERR). Restart it on the same journal once the disk
        /// is fixed.
        public static let diskFailure = Code(name: "disk failure")
        /// The code's name.
        public var description: String { self.name }
    }

    /// What went wrong.
    public internal(set) var code: Code
    /// What happened, naming the path.
    public let message: String

    init(_ message: String, code: Code = .unavailable) {
        self.message = message
        self.code = code
    }

    init(_ operation: String, path: String, errno code: Int32) {
        self.init("\(operation) \(path): \(String(cString: strerror(code)))")
    }

    /// The message.
    public var description: String { self.message }
}

/// One record of the broker's journal (DESIGN.md §8). Replaying the records in order rebuilds what
/// the broker must not lose: accepted tasks that have no result yet, and results not yet claimed.
enum JournalRecord: Equatable {
    /// A task was accepted (or submitted again for a new attempt).
    case submit(TaskID, coordinator: PeerID, attempt: UInt32, TaskEnvelope, input: [UInt8])
    /// A lost worker's task was queued again as `attempt`.
    case attempt(TaskID, UInt32)
    /// An attempt's RESULT, as forwarded to the coordinator (its wire frames, header first).
    case result(TaskID, coordinator: PeerID, frames: [[UInt8]])
    /// The broker is done with a task without a result to keep (cancelled, its coordinator lost,
    /// failed by the broker, or its stored result claimed).
    case forget(TaskID)
    /// A detached job belongs to this key (a CURVE public key, Z85): only it may read or cancel it.
    case jobOwner(job: TaskID, key: String)
    /// A detached job's name (`skynet submit --name`), for `skynet jobs`, status and the dashboard.
    case jobName(job: TaskID, name: String)

    private enum Kind: UInt8 {
        case submit = 1
        case attempt = 2
        case result = 3
        case forget = 4
        case jobOwner = 5
        case jobName = 6
    }

    /// The record framed for the file: length (u32), CRC-32 of the payload (u32), payload.
    func framed() -> [UInt8] {
        var payload = ByteWriter(capacity: 64)
        switch self {
        case .submit(let id, let coordinator, let attempt, let envelope, let input):
            payload.u8(Kind.submit.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
            payload.blob(coordinator.bytes)
            payload.u32(attempt)
            payload.blob(envelope.encode())
            payload.blob(input)
        case .attempt(let id, let attempt):
            payload.u8(Kind.attempt.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
            payload.u32(attempt)
        case .result(let id, let coordinator, let frames):
            payload.u8(Kind.result.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
            payload.blob(coordinator.bytes)
            payload.u16(UInt16(frames.count))
            for frame in frames { payload.blob(frame) }
        case .forget(let id):
            payload.u8(Kind.forget.rawValue)
            payload.bytes.append(contentsOf: id.bytes)
        case .jobOwner(let job, let key):
            payload.u8(Kind.jobOwner.rawValue)
            payload.bytes.append(contentsOf: job.bytes)
            payload.blob(Array(key.utf8))
        case .jobName(let job, let name):
            payload.u8(Kind.jobName.rawValue)
            payload.bytes.append(contentsOf: job.bytes)
            payload.blob(Array(name.utf8))
        }
        return RecordFraming.frame(payload.bytes)
    }

    /// Decodes one payload (after its length and CRC were checked).
    static func decode(_ payload: ArraySlice<UInt8>) throws(ProtocolError) -> JournalRecord {
        var reader = ByteReader(payload, what: "journal record")
        let kind = Kind(rawValue: try reader.u8())
        let id = TaskID(bytes: try reader.fixed(16))
        let record: JournalRecord
        switch kind {
        case .submit:
            let coordinator = PeerID(try reader.blob())
            let attempt = try reader.u32()
            let envelope = try TaskEnvelope.decode(try reader.blob())
            record = .submit(id, coordinator: coordinator, attempt: attempt, envelope, input: try reader.blob())
        case .attempt:
            record = .attempt(id, try reader.u32())
        case .result:
            let coordinator = PeerID(try reader.blob())
            let count = Int(try reader.u16())
            var frames: [[UInt8]] = []
            for _ in 0..<count { frames.append(try reader.blob()) }
            record = .result(id, coordinator: coordinator, frames: frames)
        case .forget:
            record = .forget(id)
        case .jobOwner:
            record = .jobOwner(job: id, key: String(decoding: try reader.blob(), as: UTF8.self))
        case .jobName:
            record = .jobName(job: id, name: String(decoding: try reader.blob(), as: UTF8.self))
        case nil:
            throw ProtocolError(.invalidValue, "unknown journal record kind")
        }
        try reader.finish()
        return record
    }
}

/// What a journal held when it was opened: the broker queues `pending` again and keeps `results`
/// for their coordinators.
struct JournalRecovery {
    struct Pending {
        let id: TaskID
        let coordinator: PeerID
        var attempt: UInt32
        let envelope: TaskEnvelope
        let input: [UInt8]
        let order: Int
    }

    struct StoredResult {
        let coordinator: PeerID
        let frames: [[UInt8]]
    }

    /// Accepted tasks without a result, in the order they were first accepted.
    var pending: [Pending] = []
    var results: [TaskID: StoredResult] = [:]
    /// The key each detached job belongs to (CURVE).
    var jobOwners: [TaskID: String] = [:]
    /// Each named detached job's name.
    var jobNames: [TaskID: String] = [:]
    /// Records read.
    var records = 0
    /// Bytes of a torn or corrupt tail that were cut off.
    var droppedBytes = 0
    var fileBytes = 0

    /// Replays records in order.
    static func replay(_ records: [JournalRecord]) -> JournalRecovery {
        var pending: [TaskID: Pending] = [:]
        var results: [TaskID: StoredResult] = [:]
        var owners: [TaskID: String] = [:]
        var names: [TaskID: String] = [:]
        for (order, record) in records.enumerated() {
            switch record {
            case .submit(let id, let coordinator, let attempt, let envelope, let input):
                results[id] = nil
                let first = pending[id]?.order ?? order
                pending[id] = Pending(
                    id: id,
                    coordinator: coordinator,
                    attempt: attempt,
                    envelope: envelope,
                    input: input,
                    order: first
                )
            case .attempt(let id, let attempt):
                pending[id]?.attempt = attempt
            case .result(let id, let coordinator, let frames):
                pending[id] = nil
                results[id] = StoredResult(coordinator: coordinator, frames: frames)
            case .forget(let id):
                pending[id] = nil
                results[id] = nil
            case .jobOwner(let job, let key):
                owners[job] = key
            case .jobName(let job, let name):
                names[job] = name
            }
        }
        var recovery = JournalRecovery()
        recovery.jobOwners = owners
        recovery.jobNames = names
        recovery.pending = pending.values.sorted { $0.order < $1.order }
        recovery.results = results
        recovery.records = records.count
        return recovery
    }
}

/// The broker's write-ahead journal: an append-only file of CRC-checked records, written by one
/// thread of its own with **group commit** (everything queued while the previous `fdatasync` ran is
/// written and synced together), so no disk I/O ever runs on the reactor thread.
///
/// ``append(_:)`` returns a sequence number; `onCommit` is called (on the writer thread) with the
/// highest sequence number that is on disk. ``compact(_:)`` replaces the file with a snapshot of the
/// live records (written to a temporary file, synced, renamed over the journal, directory synced).
/// A write or sync error is fatal: `onFailure` is called and nothing more is acknowledged.
final class Journal: Sendable {
    private enum Command {
        case records([UInt8], lastSeq: UInt64)
        case compact([[UInt8]], lastSeq: UInt64)
    }

    private struct Queue {
        var buffer: [UInt8] = []
        var bufferRecords = 0
        var commands: [Command] = []
        var nextSeq: UInt64 = 1
        var closed = false
    }

    let path: String
    private let queue = Mutex(Queue())
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    /// The writer's failure (it writes nothing after one).
    private let failure = Mutex<JournalError?>(nil)
    /// Only the writer thread uses the descriptor after `open` returns (and `close` after joining it).
    private let fd = Atomic<Int32>(-1)
    private let onCommit: @Sendable (UInt64) -> Void
    private let onFailure: @Sendable (JournalError) -> Void
    /// Bytes written to the file since it was opened or compacted (for the compaction trigger).
    private let written = Atomic<Int>(0)
    /// How long each group commit took, from its write to the end of its `fdatasync` (the writer
    /// thread records one per commit; STATUS reads them).
    private let commitTimes = Mutex(LatencyHistogram())

    /// The group commits' times so far.
    var commitHistogram: LatencyHistogram { self.commitTimes.withLock { $0 } }

    /// Opens (or creates) the journal at `path` and reads it.
    /// - Returns: the journal, and what it held; a torn tail (from a crash mid-write) is cut off.
    static func open(
        path: String,
        onCommit: @escaping @Sendable (UInt64) -> Void,
        onFailure: @escaping @Sendable (JournalError) -> Void
    ) throws(JournalError) -> (Journal, JournalRecovery) {
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw JournalError("cannot open journal", path: path, errno: errno) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        if fcntl(fd, F_SETLK, &lock) != 0 {
            Glibc.close(fd)
            throw JournalError("journal \(path) is in use by another broker")
        }
        let bytes: [UInt8]
        do throws(JournalError) {
            bytes = try Self.readAll(fd, path: path)
        } catch {
            Glibc.close(fd)
            throw error
        }
        var (records, goodBytes) = Self.parse(bytes)
        if goodBytes < bytes.count {
            if ftruncate(fd, off_t(goodBytes)) != 0 || fdatasync(fd) != 0 {
                let code = errno
                Glibc.close(fd)
                throw JournalError("cannot cut the torn tail of", path: path, errno: code)
            }
        }
        lseek(fd, 0, SEEK_END)
        var recovery = JournalRecovery.replay(records)
        records.removeAll()
        recovery.droppedBytes = bytes.count - goodBytes
        recovery.fileBytes = goodBytes
        let journal = Journal(path: path, fd: fd, onCommit: onCommit, onFailure: onFailure)
        journal.written.store(goodBytes, ordering: .relaxed)
        try journal.startWriter()
        return (journal, recovery)
    }

    private init(
        path: String,
        fd: Int32,
        onCommit: @escaping @Sendable (UInt64) -> Void,
        onFailure: @escaping @Sendable (JournalError) -> Void
    ) {
        self.path = path
        self.fd.store(fd, ordering: .relaxed)
        self.onCommit = onCommit
        self.onFailure = onFailure
    }

    /// Queues a record; returns its sequence number.
    @discardableResult
    func append(_ record: JournalRecord) -> UInt64 {
        let bytes = record.framed()
        let (seq, wake) = self.queue.withLock { queue -> (UInt64, Bool) in
            let seq = queue.nextSeq
            queue.nextSeq += 1
            queue.buffer.append(contentsOf: bytes)
            queue.bufferRecords += 1
            return (seq, queue.buffer.count == bytes.count && queue.commands.isEmpty)
        }
        if wake { self.wake.signal() }
        return seq
    }

    /// Replaces the journal with `snapshot` (framed records), after everything appended so far.
    func compact(_ snapshot: [JournalRecord]) {
        let framed = snapshot.map { $0.framed() }
        self.queue.withLock { queue in
            let last = queue.nextSeq - 1
            if !queue.buffer.isEmpty {
                queue.commands.append(.records(queue.buffer, lastSeq: last))
                queue.buffer = []
                queue.bufferRecords = 0
            }
            queue.commands.append(.compact(framed, lastSeq: last))
        }
        self.wake.signal()
    }

    /// Bytes in the journal file now (approximately, while writes are in flight).
    var fileBytes: Int { self.written.load(ordering: .relaxed) }

    /// Writes and syncs what is queued, stops the writer and closes the file.
    /// - Returns: the writer's failure, if a write or sync failed (before or while closing).
    @discardableResult
    func close() -> JournalError? {
        let already = self.queue.withLock { queue -> Bool in
            defer { queue.closed = true }
            return queue.closed
        }
        if !already {
            self.wake.signal()
            self.done.wait()
            Glibc.close(self.fd.exchange(-1, ordering: .relaxed))
        }
        return self.failure.withLock { $0 }
    }

    // MARK: Writer thread

    /// Starts the writer thread; when it cannot start, the file is closed and the error thrown.
    private func startWriter() throws(JournalError) {
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(
            &thread,
            nil,
            { arg in
                let journal = Unmanaged<Journal>.fromOpaque(arg!).takeRetainedValue()
                journal.writerLoop()
                return nil
            },
            box
        )
        guard rc == 0 else {
            Unmanaged<Journal>.fromOpaque(box).release()
            Glibc.close(self.fd.exchange(-1, ordering: .relaxed))
            throw JournalError("cannot start the journal writer thread for", path: self.path, errno: rc)
        }
        pthread_detach(thread)
    }

    private func writerLoop() {
        var failed = false
        while true {
            self.wake.wait()
            let (commands, closed) = self.queue.withLock { queue -> ([Command], Bool) in
                var commands = queue.commands
                queue.commands = []
                if !queue.buffer.isEmpty {
                    commands.append(.records(queue.buffer, lastSeq: queue.nextSeq - 1))
                    queue.buffer = []
                    queue.bufferRecords = 0
                }
                return (commands, queue.closed)
            }
            if !failed {
                do throws(JournalError) {
                    let start = ContinuousClock.now
                    var committed: UInt64 = 0
                    var dirty = false
                    for command in commands {
                        switch command {
                        case .records(let bytes, let lastSeq):
                            try self.writeAll(bytes)
                            committed = lastSeq
                            dirty = true
                        case .compact(let snapshot, let lastSeq):
                            if dirty { try self.sync() }
                            try self.replaceWithSnapshot(snapshot)
                            committed = lastSeq
                            dirty = false
                        }
                    }
                    if dirty { try self.sync() }
                    if committed > 0 {
                        let micros = UInt64((ContinuousClock.now - start).microseconds)
                        self.commitTimes.withLock { $0.record(microseconds: micros) }
                        self.onCommit(committed)
                    }
                } catch {
                    failed = true
                    var error = error
                    error.code = .diskFailure
                    self.failure.withLock { $0 = error }
                    self.onFailure(error)
                }
            }
            if closed {
                self.done.signal()
                return
            }
        }
    }

    private func writeAll(_ bytes: [UInt8]) throws(JournalError) {
        if let code = POSIX.writeAll(self.fd.load(ordering: .relaxed), bytes) {
            throw JournalError("cannot write journal", path: self.path, errno: code)
        }
        self.written.add(bytes.count, ordering: .relaxed)
    }

    private func sync() throws(JournalError) {
        if fdatasync(self.fd.load(ordering: .relaxed)) != 0 {
            throw JournalError("cannot sync journal", path: self.path, errno: errno)
        }
    }

    private func replaceWithSnapshot(_ snapshot: [[UInt8]]) throws(JournalError) {
        let temporary = self.path + ".compact"
        let fd = Glibc.open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw JournalError("cannot create", path: temporary, errno: errno) }
        let old = self.fd.exchange(fd, ordering: .relaxed)
        self.written.store(0, ordering: .relaxed)
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        _ = fcntl(fd, F_SETLK, &lock)
        var chunk: [UInt8] = []
        chunk.reserveCapacity(1 << 20)
        for record in snapshot {
            chunk.append(contentsOf: record)
            if chunk.count >= 1 << 20 {
                try self.writeAll(chunk)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        try self.writeAll(chunk)
        try self.sync()
        guard rename(temporary, self.path) == 0 else {
            throw JournalError("cannot rename the compacted journal to", path: self.path, errno: errno)
        }
        Glibc.close(old)
        try Self.syncDirectory(of: self.path)
    }

    private static func syncDirectory(of path: String) throws(JournalError) {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let fd = Glibc.open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw JournalError("cannot open directory", path: directory, errno: errno) }
        defer { Glibc.close(fd) }
        if fsync(fd) != 0 { throw JournalError("cannot sync directory", path: directory, errno: errno) }
    }

    // MARK: Reading

    private static func readAll(_ fd: Int32, path: String) throws(JournalError) -> [UInt8] {
        switch POSIX.readAll(fd) {
        case .success(let bytes): return bytes
        case .failure(let error): throw JournalError("cannot read journal", path: path, errno: error.code)
        }
    }

    /// The records of a journal image, and how many leading bytes hold whole, valid records.
    static func parse(_ bytes: [UInt8]) -> ([JournalRecord], Int) {
        var records: [JournalRecord] = []
        let offset = RecordFraming.scan(bytes, minLength: 17, maxLength: Int(ProtocolLimits.maxMessageSize) + 4096) {
            _,
            payload in
            guard let record = try? JournalRecord.decode(payload) else { return false }
            records.append(record)
            return true
        }
        return (records, offset)
    }
}

/// CRC-32 (IEEE 802.3, reflected, as in zlib), table-driven.
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        return crc
    }

    static func checksum<C: Collection<UInt8>>(_ bytes: C) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = Self.table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
