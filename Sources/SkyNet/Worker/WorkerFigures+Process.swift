import Glibc
import SkyNetCore

// What a worker reads of its own process for FIGURES (from /proc), with each heartbeat.
extension WorkerFigures {
    /// This process's resident memory and CPU time, from /proc/self.
    package static func process() -> (residentBytes: Int, cpuSeconds: Double) {
        var cpu = 0.0
        if let stat = Self.read("/proc/self/stat") {
            let ticks = Self.cpuTicks(stat: stat) ?? 0
            cpu = Double(ticks) / max(Double(sysconf(Int32(_SC_CLK_TCK))), 1)
        }
        return (Self.residentBytes(of: "self"), cpu)
    }

    /// A process's resident memory in bytes (the second field of `/proc/PID/statm`, in pages: what
    /// `VmRSS` in its `status` says), 0 when unknown.
    package static func residentBytes(of pid: String) -> Int {
        guard let statm = Self.read("/proc/\(pid)/statm"), let pages = Self.decimalField(statm[...], 1) else {
            return 0
        }
        return pages * max(sysconf(Int32(_SC_PAGESIZE)), 1)
    }

    /// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks. The command
    /// (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields are
    /// counted from after its last ")": the state (field 3) is the first there.
    package static func cpuTicks(stat: [UInt8]) -> Int? {
        guard let close = stat.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let rest = stat[(close + 1)...]
        guard let user = Self.decimalField(rest, 11), let system = Self.decimalField(rest, 12) else { return nil }
        return user + system
    }

    /// The `index`th (from 0) of the space-separated fields of `bytes` as a decimal number; nil when
    /// there are fewer fields or that one is not a number. Bytes, not `String`: split into
    /// `Character`s, the heartbeat's /proc reads cost a worker more than a thousand tasks' work.
    package static func decimalField(_ bytes: ArraySlice<UInt8>, _ index: Int) -> Int? {
        var field = -1
        var value = 0
        var digits = 0
        var inField = false
        for byte in bytes {
            if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") {
                if inField && field == index { break }
                inField = false
                continue
            }
            if !inField {
                inField = true
                field += 1
            }
            guard field == index else { continue }
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 18 else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            digits += 1
        }
        return digits > 0 ? value : nil  // digits are counted in field `index` only
    }

    private static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        // `stat` is a line of a few hundred bytes, `statm` of a few dozen.
        guard case .success(let bytes) = POSIX.readAll(fd, chunk: 512) else { return nil }
        return bytes
    }
}
