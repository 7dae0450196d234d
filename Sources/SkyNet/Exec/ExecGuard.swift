import SkyNetCore
import Glibc

/// The small process that stands between a worker and each command it runs, so that the command's
/// whole process group dies with the worker, even when the worker is killed with SIGKILL.
///
/// Linux ends a process's children with it only if each asked to (`PR_SET_PDEATHSIG`), and that
/// reaches neither grandchildren nor a child forked by a thread that has since exited (Swift's
/// thread pool retires idle threads). So ``ExecScanner`` runs each command through a guard: the
/// worker's own executable started with ``subcommand`` (`skynet exec-guard`), as the leader of a
/// new session. The guard's standard input is the read end of a pipe whose write end only the
/// worker holds (close-on-exec); when the worker dies, for whatever reason, the kernel closes it
/// and the guard reads end-of-file. It then sends TERM to its process group, waits the kill grace,
/// and sends KILL. While the worker lives, the guard waits for the command and exits as it did
/// (the same status, or the same signal), so nothing else changes.
///
/// The guard also drops privileges before it starts the command (``ExecUser``), so that starting
/// the worker's own binary never depends on what the unprivileged user may read.
public enum ExecGuard {
    /// The hidden subcommand a worker's executable must answer with ``main(_:)``.
    public static let subcommand = "exec-guard"

    /// The guard's arguments after ``subcommand``: kill grace in milliseconds, user, group and
    /// supplementary groups (`-` for unchanged), the program, then the command's `argv` (its
    /// `argv[0]` first).
    static func arguments(program: String, argv: [String], grace: Duration, user: ExecUser?) -> [String] {
        let milliseconds = grace.components.seconds * 1000 + grace.components.attoseconds / 1_000_000_000_000_000
        let groups = user.map { $0.groups.isEmpty ? "" : $0.groups.map(String.init).joined(separator: ",") } ?? "-"
        return ["\(milliseconds)", user.map { "\($0.uid)" } ?? "-", user.map { "\($0.gid)" } ?? "-", groups, program]
            + argv
    }

    /// Runs the guard with `arguments` (what followed ``subcommand`` on the command line) and exits
    /// as the command did: 126 when it could not start the command, 127 when the program is
    /// missing.
    public static func main(_ arguments: [String]) -> Never {
        guard arguments.count >= 6, let grace = Int(arguments[0]), grace >= 0 else {
            Self.fail(126, "usage: exec-guard GRACE_MS UID GID GROUPS PROGRAM ARGV0 [ARG...] (started by a worker)")
        }
        // The group this guard signals must be its own: a worker starts it as a session leader, and
        // by hand it makes its own session (never the caller's group).
        if getpgrp() != getpid() && setsid() < 0 {
            Self.fail(126, "cannot lead a process group of its own: \(Self.error)")
        }
        // TERM, INT and HUP sent to the group are the command's to answer; the guard outlives them to
        // report how it ended. SIGCHLD is taken only inside pselect (no race with the wait below).
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        var childSignals = sigset_t()
        sigemptyset(&childSignals)
        sigaddset(&childSignals, SIGCHLD)
        sigprocmask(SIG_BLOCK, &childSignals, nil)
        var wake = sigaction()
        wake.__sigaction_handler.sa_handler = { _ in }
        sigaction(SIGCHLD, &wake, nil)

        Self.dropPrivileges(user: arguments[1], group: arguments[2], groups: arguments[3])
        let child = Self.spawn(program: arguments[4], argv: Array(arguments[5...]))

        var open = sigset_t()
        sigemptyset(&open)
        var watching = true  // false once the lifeline gave data: not a worker's pipe, so not watched
        while true {
            var status: Int32 = 0
            let reaped = waitpid(child, &status, WNOHANG)
            if reaped == child { Self.exit(like: status) }
            if reaped < 0 && errno != EINTR { Self.fail(126, "lost the command: \(String(cString: strerror(errno)))") }
            // Standard input (descriptor 0, the first bit of the set) readable means end-of-file.
            var lifeline = fd_set()
            lifeline.__fds_bits.0 = watching ? 1 : 0
            if pselect(watching ? 1 : 0, &lifeline, nil, nil, nil, &open) > 0 {
                var byte: UInt8 = 0
                if read(0, &byte, 1) <= 0 { Self.workerGone(grace: grace) }
                watching = false
            }
        }
    }

    /// The worker is gone: TERM to the whole group (this guard ignores it), KILL after `grace`.
    private static func workerGone(grace: Int) -> Never {
        kill(0, SIGTERM)
        var wait = timespec(tv_sec: grace / 1000, tv_nsec: (grace % 1000) * 1_000_000)
        var left = timespec()
        while nanosleep(&wait, &left) != 0 && errno == EINTR { wait = left }
        kill(0, SIGKILL)
        _exit(137)
    }

    private static func dropPrivileges(user: String, group: String, groups: String) {
        if groups != "-" {
            let ids = groups.split(separator: ",").compactMap { gid_t($0) }
            guard setgroups(ids.count, ids) == 0 else {
                Self.fail(126, "cannot set the command's groups: \(Self.error)")
            }
        }
        if group != "-" {
            guard let gid = gid_t(group), setgid(gid) == 0 else {
                Self.fail(126, "cannot run as group \(group): \(Self.error)")
            }
        }
        if user != "-" {
            guard let uid = uid_t(user), setuid(uid) == 0 else {
                Self.fail(126, "cannot run as user \(user): \(Self.error)")
            }
        }
    }

    /// Starts the command in this guard's process group, with empty standard input, default signal
    /// handling and no blocked signal.
    private static func spawn(program: String, argv: [String]) -> pid_t {
        let started = POSIX.spawn(
            program,
            argv: argv,
            searchPath: false,
            defaultSignals: [SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE],
            actions: [.open(fd: 0, path: "/dev/null", flags: O_RDONLY)]
        )
        switch started {
        case .success(let pid): return pid
        case .failure(let error):
            Self.fail(
                error.code == ENOENT ? 127 : 126,
                "cannot run \(program): \(String(cString: strerror(error.code)))"
            )
        }
    }

    /// Exits with the command's status, or dies of its signal (without a core file of its own).
    private static func exit(like status: Int32) -> Never {
        let signalNumber = status & 0x7f
        if signalNumber == 0 { _exit((status >> 8) & 0xff) }
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        setrlimit(Int32(RLIMIT_CORE.rawValue), &noCore)
        signal(signalNumber, SIG_DFL)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        sigaddset(&unblocked, signalNumber)
        sigprocmask(SIG_UNBLOCK, &unblocked, nil)
        raise(signalNumber)
        _exit(128 + signalNumber)
    }

    private static var error: String { String(cString: strerror(errno)) }

    private static func fail(_ code: Int32, _ message: String) -> Never {
        _ = POSIX.writeAll(2, Array("skynet exec-guard: \(message)\n".utf8))
        _exit(code)
    }
}
