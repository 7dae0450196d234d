import SkyNetCore
internal import FoundationEssentials
import Glibc

/// What identifies a task's result in a ``ResultCache``: the SHA-256 of its kind and its input (for
/// `exec`, of the command's arguments, working directory and the environment it is given).
public struct CacheKey: Hashable, Sendable, CustomStringConvertible {
    /// The 32 digest bytes.
    public let bytes: [UInt8]

    /// The key of `task`.
    public init(_ task: ScanTask) {
        var hasher = SHA256()
        hasher.update(task.kind.utf8)
        hasher.update(CollectionOfOne(0))
        hasher.update(ExecRequest.cacheIdentity(kind: task.kind, input: task.input) ?? task.input)
        self.bytes = hasher.finalize()
    }

    init(bytes: [UInt8]) { self.bytes = bytes }

    /// The digest in hexadecimal.
    public var description: String {
        self.bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}

/// Completed results on disk, keyed by what produced them, so that a job run again does only what
/// has no result yet (the book's `ImageDatabase`: loaded at start, checked before the network).
///
/// Results are appended to `DIR/results.log` as they arrive (one `write` per batch, so a killed
/// submitter loses nothing it was told) and made durable with `fdatasync` at most every 100 ms and on
/// ``close()``. A torn last record (power loss mid-write) is cut off when the file is opened. Only
/// completed results are stored: a failure is never cached. One process uses a directory at a time
/// (an exclusive lock). ``Coordinator/submit(_:cache:)`` and the typed
/// ``Coordinator/submit(_:_:timeout:cache:)`` look results up before submitting and store them as
/// they arrive; identical tasks in one job run once.
public actor ResultCache {
    /// The cache's directory.
    public nonisolated let directory: String
    /// The file the results are in.
    public nonisolated let path: String
    private var fd: Int32
    private var index: [CacheKey: (offset: Int, length: Int)] = [:]
    private var end: Int
    private var dirty = false
    private var syncScheduled = false
    /// A background sync failed: the next ``store(_:)``, ``sync()`` or ``close()`` throws it.
    private var failure: ResultCacheError?
    /// How long a stored result may wait for its `fdatasync`.
    static let syncInterval = Duration.milliseconds(100)

    /// Opens the cache in `directory` (created if missing) and loads its index.
    /// - Throws: ``ResultCacheError`` when the directory or file cannot be made or read, or another
    ///   process has the cache open.
    public init(directory: String) throws(ResultCacheError) {
        self.directory = directory
        self.path = POSIX.path(directory, "results.log")
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ResultCacheError("cannot create cache directory \(directory): \(Self.reason(error))")
        }
        let fd = Glibc.open(self.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ResultCacheError("cannot open \(self.path): \(String(cString: strerror(errno)))") }
        // A lock held by another process for up to a second is waited for: a child this process
        // spawns (an exec task) holds a copy of a just-closed descriptor until its exec.
        var locked = flock(fd, LOCK_EX | LOCK_NB) == 0
        for _ in 0..<20 where !locked {
            usleep(50_000)
            locked = flock(fd, LOCK_EX | LOCK_NB) == 0
        }
        if !locked {
            Glibc.close(fd)
            throw ResultCacheError(
                "cache \(directory) is in use by another process; wait for it or use another --cache"
            )
        }
        let bytes: [UInt8]
        switch POSIX.readAll(fd) {
        case .success(let read): bytes = read
        case .failure(let error):
            Glibc.close(fd)
            throw ResultCacheError("cannot read \(self.path): \(String(cString: strerror(error.code)))")
        }
        var index: [CacheKey: (offset: Int, length: Int)] = [:]
        let good = RecordFraming.scan(bytes, minLength: 32, maxLength: Int(ProtocolLimits.maxMessageSize)) {
            offset,
            payload in
            let key = CacheKey(bytes: Array(payload.prefix(32)))
            index[key] = (offset + 8 + 32, payload.count - 32)
            return true
        }
        if good < bytes.count, ftruncate(fd, off_t(good)) != 0 {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw ResultCacheError("cannot cut the torn end of \(self.path): \(reason)")
        }
        lseek(fd, off_t(good), SEEK_SET)
        self.fd = fd
        self.index = index
        self.end = good
    }

    private static func reason(_ error: any Error) -> String {
        (error as? CocoaError)?.underlying.map { "\($0)" } ?? "\(error)"
    }

    /// How many results the cache holds.
    public var count: Int { self.index.count }

    /// The stored output for `key`, if any.
    public func output(for key: CacheKey) -> [UInt8]? {
        guard let (offset, length) = self.index[key] else { return nil }
        var bytes = [UInt8](repeating: 0, count: length)
        var done = 0
        while done < length {
            let n = bytes.withUnsafeMutableBytes {
                pread(self.fd, $0.baseAddress! + done, length - done, off_t(offset + done))
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            done += n
        }
        return bytes
    }

    /// Stores completed outputs (one `write`; the `fdatasync` follows within 100 ms). A key already
    /// stored keeps its first output.
    /// - Throws: ``ResultCacheError`` when the write fails (the disk is full): the results are still
    ///   delivered, only not cached.
    public func store(_ results: [(key: CacheKey, output: [UInt8])]) throws(ResultCacheError) {
        if let failure = self.failure {
            self.failure = nil
            throw failure
        }
        var bytes: [UInt8] = []
        var added: [(CacheKey, Int, Int)] = []
        for (key, output) in results where self.index[key] == nil {
            let offset = self.end + bytes.count + 8 + 32
            bytes.append(contentsOf: RecordFraming.frame(key.bytes + output))
            added.append((key, offset, output.count))
        }
        guard !bytes.isEmpty else { return }
        if let code = POSIX.writeAll(self.fd, bytes) {
            // A partial record would be cut off at the next open; the offset stays where it was.
            ftruncate(self.fd, off_t(self.end))
            lseek(self.fd, off_t(self.end), SEEK_SET)
            throw ResultCacheError("cannot write \(self.path): \(String(cString: strerror(code)))")
        }
        self.end += bytes.count
        for (key, offset, length) in added { self.index[key] = (offset, length) }
        self.dirty = true
        if !self.syncScheduled {
            self.syncScheduled = true
            Task {
                try? await Task.sleep(for: Self.syncInterval)
                do throws(ResultCacheError) {
                    try self.sync()
                } catch {
                    // Nobody waits for this sync: its error reaches the caller of the next call.
                    self.failure = error
                }
            }
        }
    }

    /// Makes every stored result durable now.
    public func sync() throws(ResultCacheError) {
        self.syncScheduled = false
        if let failure = self.failure {
            self.failure = nil
            throw failure
        }
        guard self.dirty, self.fd >= 0 else { return }
        if fdatasync(self.fd) != 0 {
            throw ResultCacheError("cannot sync \(self.path): \(String(cString: strerror(errno)))")
        }
        self.dirty = false
    }

    /// Syncs and closes the file; the cache answers nothing afterwards.
    public func close() throws(ResultCacheError) {
        guard self.fd >= 0 else { return }
        defer {
            Glibc.close(self.fd)
            self.fd = -1
            self.index.removeAll()
        }
        try self.sync()
    }

    deinit {
        if self.fd >= 0 {
            if self.dirty { fdatasync(self.fd) }
            Glibc.close(self.fd)
        }
    }

    /// Splits a job into what the cache answers and what must run: identical tasks (the same key)
    /// run once, the others of the same key follow it.
    func plan(_ tasks: [ScanTask]) -> CachePlan {
        var plan = CachePlan()
        var leaders: [CacheKey: TaskID] = [:]
        for (index, task) in tasks.enumerated() {
            let key = CacheKey(task)
            if let output = self.output(for: key) {
                plan.cached.append((index, output))
            } else if let leader = leaders[key] {
                plan.followers[leader, default: []].append(index)
            } else {
                leaders[key] = task.id
                plan.keys[task.id] = key
                plan.toRun.append(task)
            }
        }
        return plan
    }
}

/// A job split by a ``ResultCache``.
struct CachePlan: Sendable {
    /// Tasks with a stored output: their index in the job, and the output.
    var cached: [(index: Int, output: [UInt8])] = []
    /// The tasks to submit, one per key.
    var toRun: [ScanTask] = []
    /// The key of each task to submit.
    var keys: [TaskID: CacheKey] = [:]
    /// For a task to submit, the indices of the identical tasks that take its result.
    var followers: [TaskID: [Int]] = [:]
}

/// A result cache that cannot be opened, read or written.
public struct ResultCacheError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, in one line.
    public let description: String
    init(_ description: String) { self.description = description }
}
