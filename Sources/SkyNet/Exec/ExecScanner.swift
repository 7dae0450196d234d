import SkyNetCore
internal import FoundationEssentials
import Glibc
import Subprocess
import Synchronization
import SystemPackage

/// The `exec` kind: runs a command on the worker, without a shell, and returns its exit status and
/// output.
///
/// A worker runs only the programs it was given (`skynet worker --allow-command /usr/bin/gzip`): a
/// request names a program by absolute path or by a name on that list, and both must resolve (after
/// symlinks) to a listed file; anything else fails with "command not allowed on worker-x" and never
/// starts. No shell runs unless a shell is on the list.
///
/// Each command runs in a session of its own (so its whole process group can be ended), with a clean
/// environment: `PATH=/usr/local/bin:/usr/bin:/bin`, the request's variables, and `SKYNET_TASK_ID`,
/// `SKYNET_ATTEMPT` and `SKYNET_SEQ`. It runs in a fresh directory removed afterwards, or in the
/// request's directory. Its standard input is empty; its standard output and error are kept up to the
/// request's cap each (head and tail beyond it). A non-zero exit or a signal fails the attempt (the
/// retry policy decides what next), with the output as the failure's detail. A timeout, a cancel or
/// a worker's drain deadline ends the whole process group: TERM, then KILL after ``killGrace``. When
/// the command itself ends, whatever it left running in its group is killed too, so nothing a task
/// started outlives it.
///
/// What an allowed program can still do: read what its user can read and write where its user may
/// write. So a worker started as root is given ``runAs`` (an unprivileged account such as
/// `nobody`, which cannot read the worker's key or journal). Variables that make a program load
/// other code (`LD_PRELOAD`, `BASH_ENV`, `PATH`, …; ``ExecEnvironment``) are refused. With a
/// ``guardCommand`` each command runs under an ``ExecGuard``, so that its process group dies with
/// the worker even on SIGKILL.
public struct ExecScanner: TaskScanner {
    public typealias Input = ExecRequest
    public typealias Output = ExecOutput

    /// `exec`.
    public static let kind = "exec"
    /// The programs this scanner may run, as given (absolute paths).
    public let allowedCommands: [String]
    /// Their real paths (symlinks resolved).
    private let realPaths: Set<String>
    /// After TERM, how long a process group has before KILL.
    public let killGrace: Duration
    /// Where fresh working directories are made.
    public let workRoot: String
    /// Whom commands run as; nil: as this process.
    public let runAs: ExecUser?
    /// Variables allowed although ``ExecEnvironment`` refuses them.
    public let allowedEnvironment: Set<String>
    /// The command that starts an ``ExecGuard`` (`[skynet, "exec-guard"]`); nil: commands run
    /// directly and outlive a worker killed with SIGKILL.
    public let guardCommand: [String]?
    /// The pipe whose write end only this process holds: each guard's standard input.
    private let lifeline: Lifeline?
    /// How many bytes of each stream a failure carries as detail (head and tail).
    static let failureDetailCap = 12 << 10

    /// A scanner that runs the programs in `commands`.
    /// - Parameters:
    ///   - commands: absolute paths of executable files.
    ///   - killGrace: TERM to KILL, when a command must be stopped (default 2 s).
    ///   - workRoot: where fresh working directories go (default `$TMPDIR` or `/tmp`).
    ///   - runAs: the account commands run as (nil: this process's).
    ///   - allowedEnvironment: variable names allowed although ``ExecEnvironment`` refuses them.
    ///   - guardCommand: how to start an ``ExecGuard`` (this program and its hidden subcommand).
    /// - Throws: ``ScannerError`` naming the first path that is not absolute or not an executable
    ///   file, or a user this process cannot switch to.
    public init(
        allowing commands: [String],
        killGrace: Duration = .seconds(2),
        workRoot: String? = nil,
        runAs: ExecUser? = nil,
        allowedEnvironment: Set<String> = [],
        guardCommand: [String]? = nil
    ) throws {
        var realPaths: Set<String> = []
        for command in commands {
            guard command.hasPrefix("/") else {
                throw ScannerError(
                    "--allow-command needs an absolute path, not \(command) (try $(command -v \(command)))"
                )
            }
            guard let real = Self.realPath(command), access(real, X_OK) == 0, Self.isFile(real) else {
                throw ScannerError("--allow-command \(command): no executable file there")
            }
            realPaths.insert(real)
        }
        if let runAs, !runAs.isReachable {
            throw ScannerError("--run-as \(runAs.name) needs a worker running as root (or as \(runAs.name) itself)")
        }
        if let guardCommand {
            guard let program = guardCommand.first, program.hasPrefix("/"), access(program, X_OK) == 0 else {
                throw ScannerError("the exec guard \(guardCommand.first ?? "") is not an executable file")
            }
        }
        self.runAs = runAs
        self.allowedEnvironment = allowedEnvironment
        self.guardCommand = guardCommand
        self.lifeline = guardCommand == nil ? nil : try Lifeline()
        self.allowedCommands = commands
        self.realPaths = realPaths
        self.killGrace = killGrace
        self.workRoot =
            workRoot ?? ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    }

    /// The file `request` would run here: an absolute path on the list (after resolving symlinks), or
    /// the listed path whose file name is the given name; nil when it is not allowed.
    public func program(for name: String) -> String? {
        if name.hasPrefix("/") {
            guard let real = Self.realPath(name), self.realPaths.contains(real) else { return nil }
            return name
        }
        guard !name.contains("/") else { return nil }
        return self.allowedCommands.first { $0.split(separator: "/").last.map(String.init) == name }
    }

    public func scan(_ request: ExecRequest) async throws -> ExecOutput {
        let reference = ScanContext.task
        let system = reference?.system ?? "this host"
        if let problem = request.problem { throw ScannerError("\(problem) (on \(system))") }
        for name in request.environment.keys.sorted() {
            if let refusal = ExecEnvironment.refusal(of: name, allowed: self.allowedEnvironment) {
                throw ScannerError("\(refusal), on \(system)")
            }
        }
        guard let program = self.program(for: request.arguments[0]) else {
            throw ScannerError(
                "command not allowed on \(system): \(request.arguments[0])"
                    + " (allowed: \(self.allowedCommands.isEmpty ? "none" : self.allowedCommands.joined(separator: ", ")))"
            )
        }
        let directory: String
        let fresh: Bool
        if let given = request.workingDirectory {
            guard Self.isDirectory(given) else { throw ScannerError("no directory \(given) on \(system)") }
            (directory, fresh) = (given, false)
        } else {
            var template = Array(POSIX.path(self.workRoot, "skynet-exec-XXXXXX").utf8CString)
            guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
                throw ScannerError(
                    "cannot make a working directory in \(self.workRoot) on \(system): \(String(cString: strerror(errno)))"
                )
            }
            (directory, fresh) = (String(cString: made), true)
            if let runAs = self.runAs, chown(made, runAs.uid, runAs.gid) != 0 {
                let reason = String(cString: strerror(errno))
                try? FileManager.default.removeItem(atPath: directory)
                throw ScannerError("cannot give \(directory) to \(runAs.name) on \(system): \(reason)")
            }
        }
        defer { if fresh { try? FileManager.default.removeItem(atPath: directory) } }

        var environment = ["PATH": "/usr/local/bin:/usr/bin:/bin"].merging(request.environment) { _, given in given }
        environment["SKYNET_TASK_ID"] = reference.map { "\($0.id)" } ?? ""
        environment["SKYNET_ATTEMPT"] = reference.map { "\($0.attempt)" } ?? "1"
        environment["SKYNET_SEQ"] = "\(request.sequence)"
        let output = try await self.run(program, request, directory: directory, environment: environment)
        guard output.succeeded else {
            var detail = output
            let cap = Self.failureDetailCap
            if detail.stdout.count > cap { detail.stdout = Self.cut(detail.stdout, to: cap) }
            if detail.stderr.count > cap { detail.stderr = Self.cut(detail.stderr, to: cap) }
            let lastLine = String(decoding: output.stderr, as: UTF8.self).split(whereSeparator: \.isNewline).last
            let message = output.statusText + (lastLine.map { ": " + String($0.prefix(300)) } ?? "")
            throw ScannerError(message, detail: detail.scanBytes)
        }
        return output
    }

    private func run(
        _ program: String,
        _ request: ExecRequest,
        directory: String,
        environment: [String: String]
    ) async throws -> ExecOutput {
        var options = PlatformOptions()
        options.createSession = true
        options.teardownSequence = [
            .send(signal: .terminate, toProcessGroup: true, allowedDurationToNextStep: self.killGrace)
        ]
        let group = Mutex<pid_t>(0)
        let started = Date.now.timeIntervalSince1970
        let clock = ContinuousClock()
        let start = clock.now
        defer {
            // Whatever the command left in its group (a background grandchild), and anything a
            // teardown's TERM did not end, goes now.
            let leader = group.withLock { $0 }
            if leader > 0 { kill(-leader, SIGKILL) }
        }
        let limit = request.maxOutput
        let result: ExecutionResult<(HeadTail, HeadTail), SequenceOutput, SequenceOutput>
        // Through a guard: its arguments carry the program, the user and the command's argv; its
        // standard input is the lifeline. Without one, the user is set by the spawn itself.
        let executable: String
        let arguments: Arguments
        let input: FileDescriptorInput
        if let guardCommand = self.guardCommand, let lifeline = self.lifeline {
            executable = guardCommand[0]
            arguments = Arguments(
                Array(guardCommand.dropFirst())
                    + ExecGuard.arguments(
                        program: program,
                        argv: request.arguments,
                        grace: self.killGrace,
                        user: self.runAs
                    )
            )
            input = .fileDescriptor(FileDescriptor(rawValue: lifeline.readEnd), closeAfterSpawningProcess: false)
        } else {
            executable = program
            arguments = Arguments(
                executablePathOverride: request.arguments[0],
                remainingValues: Array(request.arguments.dropFirst())
            )
            // Standard input is empty.
            let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard null >= 0 else { throw ScannerError("cannot open /dev/null: \(String(cString: strerror(errno)))") }
            input = .fileDescriptor(FileDescriptor(rawValue: null), closeAfterSpawningProcess: true)
            if let runAs = self.runAs, !runAs.isRoot || geteuid() != 0 {
                options.userID = runAs.uid
                options.groupID = runAs.gid
                options.supplementaryGroups = runAs.groups
            }
        }
        do {
            result = try await Subprocess.run(
                .path(FilePath(executable)),
                arguments: arguments,
                // swift-subprocess 1.0.2 copies raw entries with strdup(): each must end in a NUL byte.
                environment: .custom(environment.map { Array("\($0.key)=\($0.value)".utf8) + [0] }),
                workingDirectory: FilePath(directory),
                platformOptions: options,
                input: input,
                output: .sequence,
                error: .sequence
            ) { execution in
                let pid = execution.processIdentifier.value
                group.withLock { $0 = pid }
                return try await withThrowingTaskGroup(of: Captured.self) { tasks in
                    tasks.addTask { .stdout(try await Self.collect(execution.standardOutput, limit: limit)) }
                    tasks.addTask { .stderr(try await Self.collect(execution.standardError, limit: limit)) }
                    // A grandchild left running keeps the pipes open: once the command itself has
                    // exited, its group is killed so that reading ends.
                    tasks.addTask {
                        while !Self.hasExited(pid) { try await Task.sleep(for: .milliseconds(20)) }
                        kill(-pid, SIGKILL)
                        return .exited
                    }
                    var (out, err) = (HeadTail(limit: limit), HeadTail(limit: limit))
                    var streams = 2
                    while streams > 0, let next = try await tasks.next() {
                        switch next {
                        case .stdout(let captured): (out, streams) = (captured, streams - 1)
                        case .stderr(let captured): (err, streams) = (captured, streams - 1)
                        case .exited: break
                        }
                    }
                    tasks.cancelAll()
                    return (out, err)
                }
            }
        } catch let error as SubprocessError {
            throw ScannerError("cannot run \(program): \(error)")
        }
        try Task.checkCancellation()
        let (stdout, stderr) = result.closureResult
        let (code, signal): (Int32, Int32) =
            switch result.terminationStatus {
            case .exited(let code): (code, 0)
            case .signaled(let signal): (-1, signal)
            }
        return ExecOutput(
            exitCode: code,
            signal: signal,
            stdout: stdout.bytes,
            stderr: stderr.bytes,
            stdoutBytes: stdout.total,
            stderrBytes: stderr.total,
            started: started,
            runtime: clock.now - start
        )
    }

    private enum Captured: Sendable {
        case stdout(HeadTail)
        case stderr(HeadTail)
        case exited
    }

    private static func collect(_ stream: SubprocessOutputSequence, limit: Int) async throws -> HeadTail {
        var kept = HeadTail(limit: limit)
        for try await buffer in stream { buffer.withUnsafeBytes { kept.append($0) } }
        return kept
    }

    /// Whether the child `pid` has exited (without reaping it: swift-subprocess does that).
    private static func hasExited(_ pid: pid_t) -> Bool {
        var info = siginfo_t()
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return true }
        return info._sifields._sigchld.si_pid == pid
    }

    /// The head and tail of `bytes`, `cap` bytes in all.
    private static func cut(_ bytes: [UInt8], to cap: Int) -> [UInt8] {
        var kept = HeadTail(limit: cap)
        kept.append(bytes)
        return kept.bytes
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = Glibc.realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    private static func isFile(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }

    private static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }
}

/// A pipe whose write end only this process holds (close-on-exec, never written): its read end
/// reaches end-of-file when the process dies, however it dies. Each ``ExecGuard`` reads it.
private final class Lifeline: Sendable {
    let readEnd: Int32
    let writeEnd: Int32

    init() throws {
        var ends: [Int32] = [0, 0]
        // No pipe2 in Swift's Glibc: close-on-exec is set at once, before this process spawns anything
        // with it (a command spawned meanwhile elsewhere would keep the write end open).
        guard pipe(&ends) == 0, fcntl(ends[0], F_SETFD, FD_CLOEXEC) == 0, fcntl(ends[1], F_SETFD, FD_CLOEXEC) == 0
        else {
            throw ScannerError("cannot make the commands' lifeline pipe: \(String(cString: strerror(errno)))")
        }
        (self.readEnd, self.writeEnd) = (ends[0], ends[1])
    }

    deinit {
        close(self.readEnd)
        close(self.writeEnd)
    }
}
