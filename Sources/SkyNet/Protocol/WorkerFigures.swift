import Glibc

/// What a worker says of itself with each heartbeat (FIGURES), so that one look at the broker (its
/// STATUS, its dashboard, its `/metrics`) sees the whole pool.
public struct WorkerFigures: Sendable, Codable, Equatable {
    /// Scans running now.
    public var running: Int
    /// Attempts that completed, and that failed (or timed out), since the worker started.
    public var done: Int
    public var failed: Int
    /// The worker process's resident memory, in bytes.
    public var residentBytes: Int
    /// The worker process's CPU time (user and system), in seconds.
    public var cpuSeconds: Double
    /// The host it runs on (its host name).
    public var host: String

    public init(running: Int, done: Int, failed: Int, residentBytes: Int, cpuSeconds: Double, host: String = "") {
        self.running = running
        self.done = done
        self.failed = failed
        self.residentBytes = residentBytes
        self.cpuSeconds = cpuSeconds
        self.host = host
    }

    /// This machine's host name ("" when it has none).
    package static let hostName: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()

    /// Version 1: u8 1, u32 running, u64 done, u64 failed, u64 resident bytes, u64 CPU microseconds,
    /// the host name.
    func encode() -> [UInt8] {
        var out = ByteWriter(capacity: 64)
        out.u8(1)
        out.u32(UInt32(clamping: self.running))
        out.u64(UInt64(clamping: self.done))
        out.u64(UInt64(clamping: self.failed))
        out.u64(UInt64(clamping: self.residentBytes))
        out.u64(UInt64(clamping: Int64((self.cpuSeconds * 1_000_000).rounded())))
        out.string(self.host.prefix(utf8Bytes: ProtocolLimits.nameLength))
        return out.bytes
    }

    static func decode<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes) throws(ProtocolError) -> WorkerFigures
    where Bytes.Index == Int {
        var reader = ByteReader(bytes, what: "FIGURES")
        guard try reader.u8() == 1 else { throw ProtocolError(.invalidValue, "FIGURES version is not 1") }
        let figures = WorkerFigures(
            running: Int(try reader.u32()),
            done: Int(clamping: try reader.u64()),
            failed: Int(clamping: try reader.u64()),
            residentBytes: Int(clamping: try reader.u64()),
            cpuSeconds: Double(try reader.u64()) / 1_000_000,
            host: try reader.string(maxLength: ProtocolLimits.nameLength, field: "host")
        )
        try reader.finish()
        return figures
    }

    /// This process's resident memory and CPU time, from /proc/self.
    package static func process() -> (residentBytes: Int, cpuSeconds: Double) {
        var cpu = 0.0
        if let stat = Self.read("/proc/self/stat"), let close = stat.lastIndex(of: ")") {
            // After the command's ")": the state is field 3, utime 14 and stime 15.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 12 {
                let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
                cpu = ticks / max(Double(sysconf(Int32(_SC_CLK_TCK))), 1)
            }
        }
        return (Self.residentBytes(of: "self"), cpu)
    }

    /// A process's resident memory in bytes (`VmRSS` in `/proc/PID/status`), 0 when unknown.
    package static func residentBytes(of pid: String) -> Int {
        guard let status = Self.read("/proc/\(pid)/status"),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return (line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) * 1024
    }

    private static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard case .success(let bytes) = POSIX.readAll(fd) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}
