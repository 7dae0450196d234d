import SkyNetCore
/// A command for the `exec` kind: a program and its arguments (no shell), extra environment, and
/// where it runs. Build tasks with ``ExecScanner/task(_:id:priority:timeout:)``; `skynet submit
/// --exec` builds them from a template.
public struct ExecRequest: Sendable, Equatable, CustomScanCoding {
    /// The program (an absolute path, or a name the worker's `--allow-command` list has) and its
    /// arguments: exactly what the program gets, no shell splitting or expansion.
    public var arguments: [String]
    /// Variables added to the command's otherwise clean environment.
    public var environment: [String: String]
    /// A directory on the worker to run in; nil for a fresh, empty one removed afterwards.
    public var workingDirectory: String?
    /// The task's number in its job (`{#}`, `SKYNET_SEQ`), 0 for none. Not part of the cache key.
    public var sequence: Int
    /// The most bytes of standard output, and of standard error, kept (head and tail beyond it).
    public var maxOutput: Int

    /// The default ``maxOutput``: 1 MiB a stream.
    public static let defaultMaxOutput = 1 << 20
    /// The largest ``maxOutput`` (both streams fit one 16 MiB message).
    public static let maxOutputLimit = 4 << 20

    /// A request.
    public init(
        _ arguments: [String],
        environment: [String: String] = [:],
        workingDirectory: String? = nil,
        sequence: Int = 0,
        maxOutput: Int = ExecRequest.defaultMaxOutput
    ) {
        self.arguments = arguments
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.sequence = sequence
        self.maxOutput = maxOutput
    }

    /// Version 1: u8 1, u32 sequence, u32 maxOutput, u16 argument count and u32-prefixed arguments,
    /// u16 variable count and u32-prefixed names and values (sorted by name), u32-prefixed working
    /// directory (empty: a fresh one).
    public var scanBytes: [UInt8] { self.encode(sequence: self.sequence, maxOutput: self.maxOutput) }

    private func encode(sequence: Int, maxOutput: Int) -> [UInt8] {
        var out = ByteWriter(capacity: 64)
        out.u8(1)
        out.u32(UInt32(clamping: sequence))
        out.u32(UInt32(clamping: maxOutput))
        out.u16(UInt16(clamping: self.arguments.count))
        for argument in self.arguments.prefix(Int(UInt16.max)) { out.blob(Array(argument.utf8)) }
        let variables = self.environment.sorted { $0.key < $1.key }.prefix(Int(UInt16.max))
        out.u16(UInt16(variables.count))
        for (name, value) in variables {
            out.blob(Array(name.utf8))
            out.blob(Array(value.utf8))
        }
        out.blob(Array((self.workingDirectory ?? "").utf8))
        return out.bytes
    }

    public init(scanBytes bytes: [UInt8]) throws(ScanCodingError) {
        do throws(ProtocolError) {
            var reader = ByteReader(bytes, what: "exec request")
            guard try reader.u8() == 1 else { throw ProtocolError(.invalidValue, "exec request version is not 1") }
            self.sequence = Int(try reader.u32())
            self.maxOutput = min(Int(try reader.u32()), Self.maxOutputLimit)
            self.arguments = try (0..<Int(try reader.u16())).map { _ throws(ProtocolError) in try reader.text() }
            var environment: [String: String] = [:]
            for _ in 0..<Int(try reader.u16()) { environment[try reader.text()] = try reader.text() }
            self.environment = environment
            let directory = try reader.text()
            self.workingDirectory = directory.isEmpty ? nil : directory
            try reader.finish()
        } catch {
            throw ScanCodingError("bad exec request: \(error.detail)")
        }
        guard !self.arguments.isEmpty else { throw ScanCodingError("exec request has no program") }
    }

    /// Why this request cannot run anywhere, nil when it can: no program, or a NUL byte in an
    /// argument, a variable or the directory (the kernel takes C strings, so a NUL would cut the
    /// argument short in silence). The coordinator checks it before submitting, the worker again.
    public var problem: String? {
        guard let program = self.arguments.first, !program.isEmpty else { return "the command has no program" }
        if let index = self.arguments.firstIndex(where: { $0.utf8.contains(0) }) {
            return index == 0
                ? "the program name holds a NUL byte" : "argument \(index) holds a NUL byte, which no command can take"
        }
        if let name = self.environment.first(where: { $0.key.utf8.contains(0) || $0.value.utf8.contains(0) })?.key {
            return "variable \(name.replacing("\0", with: "\\0")) holds a NUL byte"
        }
        if self.workingDirectory?.utf8.contains(0) == true { return "the working directory holds a NUL byte" }
        return nil
    }

    /// What identifies a request's result in a ``ResultCache``: everything but its sequence number
    /// and output cap; nil when `kind` is not `exec` or the input is not a request.
    static func cacheIdentity(kind: String, input: [UInt8]) -> [UInt8]? {
        guard kind == ExecScanner.kind, let request = try? ExecRequest(scanBytes: input) else { return nil }
        return request.encode(sequence: 0, maxOutput: 0)
    }

    /// The command line as a person would type it (arguments with spaces or quotes quoted).
    public var commandLine: String {
        self.arguments.map(Self.shellQuoted).joined(separator: " ")
    }

    static func shellQuoted(_ argument: String) -> String {
        let plain =
            !argument.isEmpty
            && argument.unicodeScalars.allSatisfy { scalar in
                (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar)
                    || "-_./=:,+@%".unicodeScalars.contains(scalar))
                    && scalar.isASCII
            }
        return plain ? argument : "'" + argument.replacing("'", with: "'\\''") + "'"
    }
}

/// How a command ended: its exit status or signal, and its captured output.
public struct ExecOutput: Sendable, Equatable, CustomScanCoding {
    /// The exit status, or -1 when a signal ended it.
    public var exitCode: Int32
    /// The signal that ended it, 0 when it exited.
    public var signal: Int32
    /// Standard output: all of it, or the head and tail when ``stdoutTruncated``.
    public var stdout: [UInt8]
    /// Standard error, likewise.
    public var stderr: [UInt8]
    /// How many bytes the command wrote to standard output, and to standard error.
    public var stdoutBytes: Int
    public var stderrBytes: Int
    /// When it started (seconds since 1970) and how long it ran.
    public var started: Double
    public var runtime: Duration

    /// Whether standard output was longer than the cap (``stdout`` then holds its head and tail).
    public var stdoutTruncated: Bool { self.stdoutBytes > self.stdout.count }
    /// Likewise for standard error.
    public var stderrTruncated: Bool { self.stderrBytes > self.stderr.count }
    /// Whether it exited with status 0.
    public var succeeded: Bool { self.exitCode == 0 && self.signal == 0 }

    /// An output.
    public init(
        exitCode: Int32,
        signal: Int32 = 0,
        stdout: [UInt8] = [],
        stderr: [UInt8] = [],
        stdoutBytes: Int? = nil,
        stderrBytes: Int? = nil,
        started: Double = 0,
        runtime: Duration = .zero
    ) {
        self.exitCode = exitCode
        self.signal = signal
        self.stdout = stdout
        self.stderr = stderr
        self.stdoutBytes = stdoutBytes ?? stdout.count
        self.stderrBytes = stderrBytes ?? stderr.count
        self.started = started
        self.runtime = runtime
    }

    /// Version 1: u8 1, i32 exit code, i32 signal, u64 stdout bytes, u64 stderr bytes, u64 start
    /// (Double bits), u64 runtime in microseconds, u32-prefixed stdout, u32-prefixed stderr.
    public var scanBytes: [UInt8] {
        var out = ByteWriter(capacity: 48 + self.stdout.count + self.stderr.count)
        out.u8(1)
        out.i32(self.exitCode)
        out.i32(self.signal)
        out.u64(UInt64(self.stdoutBytes))
        out.u64(UInt64(self.stderrBytes))
        out.u64(self.started.bitPattern)
        out.u64(UInt64(clamping: self.runtime.microseconds))
        out.blob(self.stdout)
        out.blob(self.stderr)
        return out.bytes
    }

    public init(scanBytes bytes: [UInt8]) throws(ScanCodingError) {
        do throws(ProtocolError) {
            var reader = ByteReader(bytes, what: "exec output")
            guard try reader.u8() == 1 else { throw ProtocolError(.invalidValue, "exec output version is not 1") }
            self.exitCode = try reader.i32()
            self.signal = try reader.i32()
            let stdoutBytes = try reader.u64()
            let stderrBytes = try reader.u64()
            self.started = Double(bitPattern: try reader.u64())
            self.runtime = .microseconds(Int64(clamping: try reader.u64()))
            self.stdout = try reader.blob()
            self.stderr = try reader.blob()
            self.stdoutBytes = Int(clamping: max(stdoutBytes, UInt64(self.stdout.count)))
            self.stderrBytes = Int(clamping: max(stderrBytes, UInt64(self.stderr.count)))
            try reader.finish()
        } catch {
            throw ScanCodingError("bad exec output: \(error.detail)")
        }
    }

    /// "exit status 3", or "killed by signal 9 (KILL)".
    public var statusText: String {
        if self.signal != 0 {
            return "killed by signal \(self.signal)\(Self.signalName(self.signal).map { " (\($0))" } ?? "")"
        }
        return "exit status \(self.exitCode)"
    }

    static func signalName(_ number: Int32) -> String? {
        let names = [
            1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 6: "ABRT", 8: "FPE", 9: "KILL", 11: "SEGV", 13: "PIPE", 14: "ALRM",
            15: "TERM",
        ]
        return names[Int(number)]
    }
}

extension ByteReader {
    /// A u32-prefixed UTF-8 string.
    fileprivate mutating func text() throws(ProtocolError) -> String {
        let what = self.what
        return try ByteDecoding.utf8(try self.take(Int(try self.u32())), field: "\(what) text")
    }
}
