import Glibc
import SkyNetCore

// What a worker reads of its own process for FIGURES (from /proc).
extension WorkerFigures {
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
