import Foundation
import Glibc

/// Ties a broker or worker that `skynet bench` started to the bench's life: a bench killed with
/// SIGKILL (or ended by a signal sent to it alone, not to its process group) left its broker and
/// workers running for good, the broker still listening.
///
/// The bench names itself in ``variable`` before it starts them; a broker or worker that finds it
/// checks every 250 ms whether its parent is still that process (a child whose parent dies is handed
/// to another, so `getppid()` changes) and, once it is not, sends itself SIGTERM: the graceful stop it
/// already has. (`PR_SET_PDEATHSIG` would fire when the *thread* that started the child exits, and
/// the bench starts them from Swift's thread pool, whose idle threads retire.)
package enum ParentWatch {
    /// The environment variable that holds the pid of the parent to outlive no more.
    package static let variable = "SKYNET_STOP_WITH_PARENT"

    /// Called by `skynet bench` before it starts children: they will stop when it is gone.
    package static func tieChildren() {
        setenv(Self.variable, "\(getpid())", 1)
    }

    /// Called by `skynet broker` and `skynet worker` first: when ``variable`` names this process's
    /// parent, stops this process (SIGTERM) once that parent is gone. Does nothing otherwise (a
    /// broker started by hand, or by a process that has since exec'd into something else).
    package static func startIfAsked() {
        guard let value = ProcessInfo.processInfo.environment[Self.variable], let parent = Int32(value),
            parent == getppid()
        else { return }
        // The broker's or worker's own children (the commands of `--allow-command`) are not tied.
        unsetenv(Self.variable)
        Thread.detachNewThread {
            while getppid() == parent { usleep(250_000) }
            kill(getpid(), SIGTERM)
        }
    }
}
