import Glibc
import SkyNetCore

/// A record of each task's life at a coordinator, one JSON line per event, for the HA fault tests'
/// checker (`skynet submit --trace FILE`): when its SUBMIT first went out, when the broker said
/// ACCEPTED, and each RESULT that came back, each with the broker the coordinator talked to then.
/// Written with `write(2)` on the coordinator's reactor thread; nothing is buffered, so a line is on
/// its way to the file before the next event.
///
/// Lines: `{"t":<seconds since the epoch>,"e":"submitted"|"accepted"|"result","id":"<task id>",
/// "b":"<broker endpoint>"}`; a result also has `"s"` (its status) and `"w"` (the system that ran it).
final class TaskTrace {
    private let fd: Int32

    /// - Throws: ``CoordinatorError`` when the file cannot be created.
    init(path: String) throws(CoordinatorError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw CoordinatorError(
                .connection,
                "cannot create the trace file \(path): \(String(cString: strerror(errno)))"
            )
        }
        self.fd = fd
    }

    deinit { close(self.fd) }

    func record(_ event: String, _ id: TaskID, broker: String, status: String? = nil, system: String? = nil) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let seconds = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        var line = "{\"t\":\(seconds),\"e\":\"\(event)\",\"id\":\"\(id)\",\"b\":\"\(broker)\""
        if let status { line += ",\"s\":\"\(status)\"" }
        if let system { line += ",\"w\":\"\(String(system.filter { $0 != "\"" && $0 != "\\" }))\"" }
        line += "}\n"
        _ = POSIX.writeAll(self.fd, Array(line.utf8))
    }
}
