import Dispatch
import Glibc
import SkyNetCore
import Synchronization

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
        if let rc = POSIX.detachedThread({ self.writerLoop() }) {
            Glibc.close(self.fd.exchange(-1, ordering: .relaxed))
            throw JournalError("cannot start the journal writer thread for", path: self.path, errno: rc)
        }
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
