/// How long a ``Reactor`` polls without blocking before it sleeps: an adaptive window, like the one
/// Linux's `haltpoll` idle governor keeps for a virtual CPU.
///
/// Waking a thread that sleeps costs far more than the work of a message on a virtual machine: the
/// waker's vCPU sends an interrupt, the sleeper's halted vCPU has to be scheduled again by the host
/// (a scheduler trace here showed 15–25 µs of that per wake-up, six wake-ups per credit cycle). A
/// reactor that expects its next message within microseconds polls for it instead, yielding the CPU to
/// any other runnable thread between polls (`sched_yield`), so it never halts its vCPU in the middle
/// of a burst and does not take the CPU from libzmq's I/O threads.
///
/// The window adapts to the traffic, per reactor:
/// - the next event came while polling: the window stays;
/// - it came after the window but within ``limit``: the window doubles (from ``growStart``, at most
///   ``limit``), since a longer poll would have caught it;
/// - it came later than ``limit`` (an idle reactor: heartbeats, long scans): the window halves, and
///   below ``growStart`` it is zero, so an idle process does not poll at all.
///
/// A reactor with a message every few hundred microseconds or less polls between them and uses the
/// CPU it waits on (bounded by ``limit`` after the last event); one with less traffic sleeps as it
/// would without this. ``limit`` zero turns it off.
public struct IdleSpin: Sendable, Equatable {
    /// The longest window (default 200 µs, haltpoll's default too); zero turns polling off.
    public let limit: Duration
    /// The window after the first short wait (50 µs, as haltpoll's `guest_halt_poll_grow_start`).
    public static let growStart: Duration = .microseconds(50)
    /// The limit reactors use unless told otherwise.
    public static let defaultLimit: Duration = .microseconds(200)

    /// How long to poll before the next sleep.
    public private(set) var window: Duration = .zero

    /// A policy with the given longest window (negative means zero).
    public init(limit: Duration = IdleSpin.defaultLimit) {
        self.limit = max(limit, .zero)
    }

    /// Records how long the reactor waited for its last event (polling and sleeping together) and
    /// adapts the window for the next wait.
    public mutating func waited(_ idle: Duration) {
        guard self.limit > .zero, idle > self.window else { return }
        if idle <= self.limit {
            self.window = min(max(self.window * 2, Self.growStart), self.limit)
        } else {
            self.window = self.window / 2
            if self.window < Self.growStart { self.window = .zero }
        }
    }
}
