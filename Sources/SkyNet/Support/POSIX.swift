import SkyNetCore
import Glibc

/// Small POSIX helpers the library and the command line share.
package enum POSIX {
    /// Writes all of `bytes` to `fd`, again after `EINTR` and short writes.
    /// - Returns: nil, or the `errno` of the write that failed.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            offset += n
        }
        return nil
    }

    /// What a child's descriptors get before its program runs.
    package enum SpawnAction: Sendable {
        /// `path` opened with `flags` as descriptor `fd`.
        case open(fd: Int32, path: String, flags: Int32)
        /// Descriptor `fd` closed (one already closed is skipped).
        case close(fd: Int32)
    }

    /// Starts `program` with `argv` (and this process's environment) through `posix_spawn`, with no
    /// signal blocked in the child and `defaultSignals` (nil: every signal) back at their default
    /// handling, whatever this process set.
    /// - Parameter searchPath: look `program` up in `PATH` (`posix_spawnp`).
    /// - Returns: the child's pid, or the error number when it could not be started.
    package static func spawn(
        _ program: String,
        argv: [String],
        searchPath: Bool,
        defaultSignals: [Int32]? = nil,
        actions spawnActions: [SpawnAction]
    ) -> Result<Int32, POSIXErrno> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for action in spawnActions {
            switch action {
            case .open(let fd, let path, let flags): posix_spawn_file_actions_addopen(&actions, fd, path, flags, 0)
            case .close(let fd): posix_spawn_file_actions_addclose(&actions, fd)
            }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        if let defaultSignals {
            sigemptyset(&defaults)
            for number in defaultSignals { sigaddset(&defaults, number) }
        } else {
            sigfillset(&defaults)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var pointers: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        var pid: pid_t = 0
        let result =
            searchPath
            ? posix_spawnp(&pid, program, &actions, &attributes, &pointers, environ)
            : posix_spawn(&pid, program, &actions, &attributes, &pointers, environ)
        return result == 0 ? .success(pid) : .failure(POSIXErrno(code: result))
    }

    /// Runs `body` on a new detached thread of its own (a journal's writer: blocking I/O that must
    /// never wait on the reactor or the Swift pool).
    /// - Returns: nil, or the error number when the thread could not start.
    package static func detachedThread(_ body: @escaping @Sendable () -> Void) -> Int32? {
        final class Body: Sendable {
            let run: @Sendable () -> Void
            init(_ run: @escaping @Sendable () -> Void) { self.run = run }
        }
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(
            &thread,
            nil,
            { argument in
                Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue().run()
                return nil
            },
            box
        )
        guard rc == 0 else {
            Unmanaged<Body>.fromOpaque(box).release()
            return rc
        }
        pthread_detach(thread)
        return nil
    }

    /// Reads `fd` from its offset to the end, `chunk` bytes at a time (a short file, such as a line
    /// of /proc, is read through a small chunk on the stack rather than 256 KiB from the heap).
    /// - Returns: the bytes, or the `errno` of the read that failed.
    package static func readAll(_ fd: Int32, chunk size: Int = 1 << 18) -> Result<[UInt8], POSIXErrno> {
        // An uninitialized chunk: a zeroed one of 1 MiB cost a megabyte's memset per call, which a
        // worker paid for each /proc read with every heartbeat.
        withUnsafeTemporaryAllocation(byteCount: max(size, 64), alignment: 16) { chunk in
            var bytes: [UInt8] = []
            while true {
                let n = Glibc.read(fd, chunk.baseAddress!, chunk.count)
                if n < 0 {
                    if errno == EINTR { continue }
                    return .failure(POSIXErrno(code: errno))
                }
                if n == 0 { return .success(bytes) }
                bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            }
        }
    }

    /// Raises this process's soft limit on open descriptors to its hard limit (at most 1,048,576),
    /// as a server that holds one descriptor per peer should.
    /// - Returns: the soft limit now in force.
    @discardableResult
    package static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        let wanted = min(limit.rlim_max, 1 << 20)
        if limit.rlim_cur < wanted {
            var raised = limit
            raised.rlim_cur = wanted
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
    }

    /// Whether `fd` is a regular file (not a pipe, a FIFO, a terminal or another device).
    package static func isRegularFile(_ fd: Int32) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }

    /// `directory/name`, with one slash between them.
    package static func path(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}

/// An `errno` value, as an error.
package struct POSIXErrno: Error, Sendable {
    package let code: Int32
}
