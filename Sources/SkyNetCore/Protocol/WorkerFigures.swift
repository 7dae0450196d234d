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
    package func encode() -> [UInt8] {
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

    package static func decode<Bytes: RandomAccessCollection<UInt8>>(
        _ bytes: Bytes
    ) throws(ProtocolError) -> WorkerFigures
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
}
