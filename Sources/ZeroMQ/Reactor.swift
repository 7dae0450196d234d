import CZMQ
import Glibc
import Synchronization

/// A timer scheduled on a ``Reactor``.
public struct TimerID: Hashable, Sendable {
    let raw: UInt64
}

/// One OS thread that owns ZeroMQ sockets, blocks in `poll(2)`, and is the `SerialExecutor` of the
/// actors that own those sockets.
///
/// Swift concurrency jobs for those actors go into a `Mutex`-protected queue and wake the poll through
/// an `eventfd`. Socket handlers and timers run on the same thread, so they may touch actor state: a
/// closure formed in an isolated method of such an actor is isolated to it and calls in directly (the
/// hot per-turn handlers do that); a `[weak self]` one goes through `assumeIsolated` (``checkIsolated()``
/// tells the runtime where it is), which costs an executor check or two. The loop is level-triggered
/// for its handlers: a handler reads a bounded batch and whatever is left calls it again on the next
/// turn. Underneath, it polls the sockets' `ZMQ_FD`s with `poll(2)`: a socket whose descriptor fired
/// has its handler called, and a socket is asked `ZMQ_EVENTS` only when a libzmq call may have taken
/// in its descriptor's signal (``Socket/Readiness``), where `zmq_poll` asked every socket two or three
/// times a call (DESIGN.md §3). Timers live in the reactor too (heartbeats, deadlines) and set the
/// poll's timeout, so there is no task sleeping per peer.
///
/// Register sockets and timers only from code already running on the reactor (an isolated method of
/// an actor whose executor this is: an isolated closure is then called on that actor's own executor);
/// nothing in here blocks except the poll itself.
// SAFETY of @unchecked Sendable: the state under "reactor thread only" is read and written only on the
// reactor's own thread (every entry point that touches it calls `assertOnReactor()`); other threads
// reach the reactor only through `inbox` (a Mutex) and the eventfd.
public final class Reactor: SerialExecutor, @unchecked Sendable {
    /// The ZeroMQ context the reactor's sockets belong to.
    public let context: ZMQContext
    /// A name for logs and the thread.
    public let name: String

    struct Inbox {
        var jobs: [UnownedJob] = []
        var stopRequested = false
    }

    let inbox = Mutex(Inbox())
    /// Whether `inbox` may hold work (jobs or a stop request): set under its lock whenever either is
    /// added, cleared under it when the loop takes the jobs and no stop is pending. The loop reads it
    /// before locking, so a turn with nothing enqueued takes no lock (three or four a turn, ~40
    /// instructions each). A job enqueued after the read is not missed: from another thread it wakes
    /// the poll (the empty -> non-empty transition writes the eventfd), and from the reactor thread
    /// it was stored before the read.
    let inboxPending = Atomic<Bool>(false)
    let wakeFD: Int32
    /// Wakes the poll when the next timer is due, to well under a millisecond (a poll's own timeout
    /// counts whole milliseconds, rounded up: a 1 ms sleep took up to 2).
    let timerFD: Int32
    /// The descriptors in the poll set before the sockets': the eventfd, then the timerfd.
    private static let fixedItems = 2
    private let threadID = Atomic<UInt>(0)
    private let finished = Mutex(false)

    // Reactor thread only. The properties used on every turn of the loop skip the dynamic
    // exclusivity check in release builds (~65 instructions a use, about 40 uses per latency round
    // trip): each is read or written in place with nothing called meanwhile that could touch it (a
    // handler, a timer's body, a hook runs after the access that found it has ended), and debug
    // builds, every test and the fuzzer keep the checks. See docs/DESIGN.md §3, "Unchecked
    // exclusivity".
    /// `pollSet`: the eventfd, the timerfd, then each registered socket's `ZMQ_FD`, in `handlers`'
    /// order. `handlers[i].readable`: whether the socket had a message waiting when last asked.
    #if DEBUG
    private var pollSet: [pollfd] = []
    private var handlers: [Registration] = []
    #else
    @exclusivity(unchecked) private var pollSet: [pollfd] = []
    @exclusivity(unchecked) private var handlers: [Registration] = []
    #endif
    private struct Registration {
        let id: UInt64
        let socket: Socket
        let handler: Callback
        var readable = false
    }
    /// The boxes of handlers and hooks removed while a body ran (see ``Callback``, in
    /// Reactor+Hooks.swift), and how many
    /// bodies are running (one; a count in case a body ever runs another).
    #if DEBUG
    var retired: [Callback] = []
    var bodiesRunning = 0
    #else
    @exclusivity(unchecked) var retired: [Callback] = []
    @exclusivity(unchecked) var bodiesRunning = 0
    #endif

    /// Timers are due at nanoseconds on the monotonic clock (``Stopwatch/now()``), not at a
    /// `ContinuousClock.Instant` (its layout is not fixed outside the standard library, so an array of
    /// timers holding one was appended to, searched and compared through the runtime's value
    /// witnesses) nor at a `Duration` (128-bit attoseconds: each comparison a call, each conversion
    /// for the timerfd or the poll a 128-bit multiplication, ~1,000 instructions a latency round trip
    /// on the cluster's reactor). A `Duration` given is turned into nanoseconds once, clamped.
    var monotonicNow: Int64 { Int64(clamping: Stopwatch.now()) }
    struct Timer {
        let id: UInt64
        var due: Int64
        let interval: Int64?
        let body: () -> Void
        /// Made by ``makeTimer(_:)``: it stays, disarmed, when it fires.
        var kept = false
        /// Whether it fires at `due` (only a kept timer is ever disarmed).
        var armed = true
    }
    /// The earliest `due` of the armed `timers` (nil when none is): every turn of the loop asks it, and
    /// only a turn that reaches it walks the timers. `armedDue`: the instant the timerfd is armed for
    /// (nil when disarmed or fired). (Unchecked in release builds, as `pollSet`.)
    #if DEBUG
    var timers: [Timer] = []
    var nextDue: Int64?
    var armedDue: Int64?
    var lastArmDelay: (delay: Duration, nanoseconds: Int64) = (.zero, 0)
    #else
    @exclusivity(unchecked) var timers: [Timer] = []
    @exclusivity(unchecked) var nextDue: Int64?
    @exclusivity(unchecked) var armedDue: Int64?
    /// The last delay ``arm(_:after:)`` was given, and it in nanoseconds: a kept timer is most often
    /// armed with the same delay each time, which is then not converted again.
    @exclusivity(unchecked) var lastArmDelay: (delay: Duration, nanoseconds: Int64) = (.zero, 0)
    #endif
    /// How much earlier than the next timer the timerfd wakes a reactor that polls (`--idle-spin`
    /// above zero), which then polls until the timer is due: a sleeping thread on a virtual machine
    /// takes some 30–80 µs to run again after its wake-up, which made a scan's 1 ms sleep last about
    /// 1.1 ms on a busy worker.
    static let earlyWake: Int64 = 80_000
    #if DEBUG
    var beforePollHooks: [Hook] = []
    #else
    /// (Unchecked in release builds, as `pollSet`: the loop reads a hook's fields in place and calls
    /// its body after that access has ended.)
    @exclusivity(unchecked) var beforePollHooks: [Hook] = []
    #endif
    var nextID: UInt64 = 1
    private var pthread: pthread_t = 0
    /// How long to poll without blocking before the next sleep (adapts to the traffic), and the waits
    /// that ended while polling, before a sleep; the jobs run. (Unchecked in release builds, as
    /// `pollSet`.)
    #if DEBUG
    var spin: IdleSpin
    private var polledWakeupCount = 0
    var jobCount = 0
    #else
    @exclusivity(unchecked) var spin: IdleSpin
    @exclusivity(unchecked) private var polledWakeupCount = 0
    @exclusivity(unchecked) var jobCount = 0
    #endif

    /// Starts a reactor thread.
    /// - Parameters:
    ///   - context: the ZeroMQ context for this reactor's sockets.
    ///   - name: a name for logs.
    ///   - idleSpin: the longest time the reactor polls without blocking, under steady traffic, before
    ///     it sleeps (``IdleSpin``; default 200 µs, zero never polls). An idle reactor does not poll.
    /// - Throws: ``ZMQError`` when no `eventfd` or thread can be had.
    public init(
        context: ZMQContext,
        name: String = "reactor",
        idleSpin: Duration = IdleSpin.defaultLimit
    ) throws(ZMQError) {
        self.context = context
        self.name = name
        self.spin = IdleSpin(limit: idleSpin)
        let fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        if fd < 0 { throw ZMQError(code: errno, operation: "eventfd") }
        self.wakeFD = fd
        let timerFD = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        if timerFD < 0 {
            close(fd)
            throw ZMQError(code: errno, operation: "timerfd_create")
        }
        self.timerFD = timerFD
        self.pollSet = [
            pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
            pollfd(fd: timerFD, events: Int16(POLLIN), revents: 0),
        ]
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(
            &tid,
            nil,
            { arg in
                let reactor = Unmanaged<Reactor>.fromOpaque(arg!).takeRetainedValue()
                reactor.threadID.store(UInt(pthread_self()), ordering: .releasing)
                // Timers (a scan's 1 ms sleep) fire within microseconds of their time, not 50 µs late.
                _ = skynet_set_timer_slack(1000)
                reactor.loop()
                return nil
            },
            box
        )
        if rc != 0 {
            Unmanaged<Reactor>.fromOpaque(box).release()
            close(fd)
            close(timerFD)
            throw ZMQError(code: rc, operation: "pthread_create")
        }
        self.pthread = tid
        // Wait (briefly) until the thread has published its id, so checkIsolated() is exact from here on.
        while self.threadID.load(ordering: .acquiring) == 0 { sched_yield() }
    }

    // MARK: The thread (the jobs it runs as an executor: Reactor+Jobs.swift)

    /// Traps unless called on the reactor thread.
    public func checkIsolated() {
        precondition(self.isOnReactorThread, "not on reactor '\(self.name)'")
    }

    /// Whether the caller is running on this reactor's thread.
    public var isOnReactorThread: Bool {
        UInt(pthread_self()) == self.threadID.load(ordering: .acquiring)
    }

    func assertOnReactor() {
        precondition(self.isOnReactorThread, "reactor '\(self.name)' state touched from another thread")
    }

    // MARK: Sockets (call on the reactor thread; hooks: Reactor+Hooks.swift; timers: Reactor+Timers.swift)

    /// Calls `handler` on the reactor thread whenever `socket` has a message to read.
    /// The handler should read a bounded batch; the level-triggered poll calls it again if more is left.
    public func register(_ socket: Socket, handler: @escaping () -> Void) {
        self.assertOnReactor()
        let id = self.nextID
        self.nextID += 1
        // Asked on the next turn: whatever was queued before registering has not been announced.
        socket.signalled()
        socket.watchedByReactor = true
        self.pollSet.append(pollfd(fd: socket.signalDescriptor, events: Int16(POLLIN), revents: 0))
        // Boxed, and called without a retain (see ``Callback``): the context of a closure that
        // captures only its actor is the actor itself, whose retain and release take the runtime's
        // slow path when anything references it weakly (~115 instructions a call).
        self.handlers.append(Registration(id: id, socket: socket, handler: Callback(handler)))
    }

    /// Stops watching `socket` (call before closing it).
    public func unregister(_ socket: Socket) {
        self.assertOnReactor()
        guard let index = self.handlers.firstIndex(where: { $0.socket === socket }) else { return }
        socket.watchedByReactor = false
        self.retire(self.handlers.remove(at: index).handler)
        self.pollSet.remove(at: index + Self.fixedItems)
    }

    /// Asks the loop to finish after the jobs already queued, and waits for the thread to end.
    /// Call it from outside the reactor, after every actor on it is done; sockets must be closed first
    /// if the context is to be terminated afterwards.
    public func shutdown() {
        precondition(!self.isOnReactorThread, "shutdown() called on the reactor itself")
        let first = self.finished.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        guard first else { return }
        self.inbox.withLock { inbox in
            inbox.stopRequested = true
            self.inboxPending.store(true, ordering: .releasing)
        }
        self.wake()
        pthread_join(self.pthread, nil)
        close(self.wakeFD)
        close(self.timerFD)
    }

    // MARK: The loop

    private func loop() {
        var batch: [UnownedJob] = []
        // The ids of this turn's readable sockets, the first `readyCount` of `ready` (overwritten, not
        // emptied: `removeAll(keepingCapacity:)` cost ~80 instructions a turn).
        var ready: [UInt64] = []
        var readyCount = 0
        let executor = self.asUnownedSerialExecutor()
        while true {
            self.runBeforePollHooks()
            // Before any sleep, the sockets this turn's calls may have changed are asked: one of those
            // calls may have taken in a socket's signal along with its message.
            guard let anyReadable = self.askSockets() else { break }
            // A socket with a message, or jobs already waiting (enqueued from this thread, without a
            // wake-up): poll without blocking.
            let rc =
                !anyReadable && !self.jobsWaiting ? self.waitForEvents() : self.poll(timeout: 0)
            if rc < 0 {
                if errno == EINTR { continue }
                // Another error (no memory for the poll): nothing fired; the sockets known to be
                // readable still are.
            }
            if rc > 0 {
                if self.pollSet[0].revents != 0 {
                    var value: UInt64 = 0
                    _ = read(self.wakeFD, &value, 8)  // reset before draining, so no wake-up is lost
                }
                if self.pollSet[1].revents != 0 {
                    var expirations: UInt64 = 0
                    _ = read(self.timerFD, &expirations, 8)
                    self.armedDue = nil
                }
            }
            // Note which sockets are readable before jobs run: a job may (un)register sockets. A
            // socket whose descriptor fired has commands queued, most often a message: its handler
            // runs without asking first (its receive takes the commands in, and finds nothing at once
            // when none of them was a message). One pass over the sockets for both.
            let fired = rc > 0
            readyCount = 0
            if ready.count < self.handlers.count { ready = [UInt64](repeating: 0, count: self.handlers.count) }
            for index in self.handlers.indices {
                if fired && self.pollSet[index + Self.fixedItems].revents != 0 {
                    self.handlers[index].socket.signalled()
                    self.handlers[index].readable = true
                }
                if self.handlers[index].readable {
                    ready[readyCount] = self.handlers[index].id
                    readyCount += 1
                }
            }
            var stop = self.runJobs(&batch, on: executor)
            self.fireDueTimers()
            for position in 0..<readyCount {
                let id = ready[position]
                // The handler only, unretained (the registration whole would retain its socket too).
                if let index = self.handlers.firstIndex(where: { $0.id == id }) {
                    let handler = Unmanaged.passUnretained(self.handlers[index].handler)
                    self.call(handler)
                }
            }
            // What the handlers started (a scan, a hop to another actor) runs now, not after another poll.
            if readyCount > 0, self.runJobs(&batch, on: executor) { stop = true }
            if stop && !self.jobsWaiting { break }
        }
    }

    /// The current ``IdleSpin`` window (reactor thread only; for tests).
    var spinWindow: Duration {
        self.assertOnReactor()
        return self.spin.window
    }

    /// How many jobs (a task's run until it suspends or hops) this reactor has run (reactor thread
    /// only; for tests).
    var jobsRun: Int {
        self.assertOnReactor()
        return self.jobCount
    }

    /// How many waits ended while polling, before a sleep (reactor thread only; for tests).
    var polledWakeups: Int {
        self.assertOnReactor()
        return self.polledWakeupCount
    }

    private func poll(timeout: Int) -> Int32 {
        Glibc.poll(&self.pollSet, nfds_t(self.pollSet.count), Int32(timeout))
    }

    /// Asks `ZMQ_EVENTS` of each registered socket that may have changed since it was last asked, and
    /// notes the answer: returns whether any registered socket has a message waiting, or nil when the
    /// context is being terminated (the loop ends). A socket closed while registered is left out of
    /// the poll from then on (its descriptor -1: the number may be reused).
    private func askSockets() -> Bool? {
        var any = false
        for index in self.handlers.indices {
            if self.handlers[index].socket.readiness != .asked {
                // Asked without a retain of the socket (one and a release, ~40 instructions, for each
                // of the five sockets a latency round trip asks on the cluster's reactor): the
                // registration holds it strongly, and nothing in `messageWaiting()` (libzmq's answer
                // and the socket's own fields) can drop the registration, so the reference the
                // closure is given stays valid through the call.
                let socket = Unmanaged.passUnretained(self.handlers[index].socket)
                let answer = socket._withUnsafeGuaranteedRef { socket -> Result<Bool, ZMQError> in
                    do throws(ZMQError) {
                        return .success(try socket.messageWaiting())
                    } catch {
                        return .failure(error)
                    }
                }
                switch answer {
                case .success(let readable): self.handlers[index].readable = readable
                case .failure(let error):
                    if error.code == ETERM { return nil }
                    self.handlers[index].readable = false
                }
                if self.handlers[index].socket.isClosed { self.pollSet[index + Self.fixedItems].fd = -1 }
            }
            if self.handlers[index].readable { any = true }
        }
        return any
    }

    /// Waits for a socket, the eventfd or the next timer: first by polling without blocking for the
    /// ``IdleSpin`` window (yielding the CPU between polls, and never past the next timer), then by
    /// sleeping in `poll(2)`. How long the wait took adapts the window.
    private func waitForEvents() -> Int32 {
        guard self.spin.limitNanoseconds > 0 else { return self.poll(timeout: self.pollTimeout()) }
        let began = self.monotonicNow
        var rc: Int32 = 0
        var end = began + self.spin.windowNanoseconds
        if let due = self.nextDue {
            // A timer due within the early wake-up is polled for, whatever the window (see
            // ``earlyWake``); no poll goes past a timer.
            if due - began <= Self.earlyWake || due < end { end = due }
        }
        if end > began {
            repeat {
                rc = self.poll(timeout: 0)
                if rc != 0 {
                    self.polledWakeupCount &+= 1
                    break
                }
                sched_yield()
            } while self.monotonicNow < end
        }
        if rc == 0 { rc = self.poll(timeout: self.pollTimeout()) }
        self.spin.waited(nanoseconds: self.monotonicNow - began)
        return rc
    }

}
