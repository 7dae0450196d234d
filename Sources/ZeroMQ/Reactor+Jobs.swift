import Glibc
import Synchronization

// The reactor as an executor: jobs from Swift concurrency, queued from any thread in `inbox` and run
// by the loop (Reactor.swift) on the reactor thread, in both roles (serial and task executor).
extension Reactor {
    /// Queues a job to run on the reactor thread (waking its poll).
    public func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        // Only the empty -> non-empty transition needs a wake-up; the loop drains the whole queue.
        // A job enqueued by the reactor itself needs none: the loop looks at the inbox again before
        // it polls (a task hopping between actors on this reactor would otherwise cost a write, a
        // poll and a read of the eventfd for every hop).
        let onReactor = self.isOnReactorThread
        let wake = self.inbox.withLock { inbox -> Bool in
            inbox.jobs.append(unowned)
            self.inboxPending.store(true, ordering: .releasing)
            return inbox.jobs.count == 1 && !onReactor
        }
        if wake { self.wake() }
    }

    /// Whether jobs are waiting in the inbox (the reactor thread: without a lock when nothing was
    /// enqueued since the loop last took them).
    var jobsWaiting: Bool {
        self.inboxPending.load(ordering: .acquiring) && self.inbox.withLock { !$0.jobs.isEmpty }
    }

    /// This reactor as a serial executor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func wake() {
        var one: UInt64 = 1
        _ = write(self.wakeFD, &one, 8)
    }

    /// Runs the queued jobs, and those they enqueue in turn (an actor hop on this reactor), for a
    /// bounded number of rounds so that sockets and timers still get their turn. Returns whether a
    /// stop was requested.
    func runJobs(_ batch: inout [UnownedJob], on executor: UnownedSerialExecutor) -> Bool {
        // Most turns have no jobs: nothing else is done for them.
        guard self.inboxPending.load(ordering: .acquiring) else { return false }
        var stop = false
        let taskExecutor = self.asUnownedTaskExecutor()
        for _ in 0..<16 {
            guard self.inboxPending.load(ordering: .acquiring) else { break }
            stop = self.inbox.withLock { inbox -> Bool in
                swap(&inbox.jobs, &batch)
                self.inboxPending.store(inbox.stopRequested, ordering: .releasing)
                return inbox.stopRequested
            }
            if batch.isEmpty { break }
            // As the reactor in both roles (serial and task executor): a task that prefers the reactor
            // then calls its actors inline, where each call and return was a job again. A task with no
            // preference pays one instead, calling from one actor on it into another (DESIGN.md §3,
            // eighteenth round).
            for job in batch { job.runSynchronously(isolatedTo: executor, taskExecutor: taskExecutor) }
            self.jobCount &+= batch.count
            batch.removeAll(keepingCapacity: true)
        }
        return stop
    }
}

/// A reactor is also a `TaskExecutor`: a task that prefers it runs its nonisolated code (and the
/// default actors it calls) on the reactor thread. Workers use it for scans that never block, so a
/// short scan needs no hand-off to the global pool and back.
extension Reactor: TaskExecutor {
    /// This reactor as a task executor (`withTaskExecutorPreference`).
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }
}
