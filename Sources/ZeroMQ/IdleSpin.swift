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
    public var limit: Duration { .nanoseconds(self.limitNanoseconds) }
    /// The window after the first short wait (50 µs, as haltpoll's `guest_halt_poll_grow_start`).
    public static let growStart: Duration = .microseconds(50)
    /// The limit reactors use unless told otherwise.
    public static let defaultLimit: Duration = .microseconds(200)

    /// How long to poll before the next sleep.
    public var window: Duration { .nanoseconds(self.windowNanoseconds) }

    /// ``limit`` and ``window`` in nanoseconds, as the reactor's clock reads them: a `Duration` is
    /// 128-bit attoseconds, and the reactor asks these every turn.
    let limitNanoseconds: Int64
    private(set) var windowNanoseconds: Int64 = 0
    private static let growStartNanoseconds: Int64 = 50_000

    /// A policy with the given longest window (negative means zero).
    public init(limit: Duration = IdleSpin.defaultLimit) {
        self.limitNanoseconds = max(limit.clampedNanoseconds, 0)
    }

    /// Records how long the reactor waited for its last event (polling and sleeping together) and
    /// adapts the window for the next wait.
    public mutating func waited(_ idle: Duration) {
        self.waited(nanoseconds: idle.clampedNanoseconds)
    }

    /// ``waited(_:)`` in nanoseconds.
    mutating func waited(nanoseconds idle: Int64) {
        guard self.limitNanoseconds > 0, idle > self.windowNanoseconds else { return }
        if idle <= self.limitNanoseconds {
            let doubled = self.windowNanoseconds > Int64.max / 2 ? Int64.max : self.windowNanoseconds * 2
            self.windowNanoseconds = min(max(doubled, Self.growStartNanoseconds), self.limitNanoseconds)
        } else {
            self.windowNanoseconds /= 2
            if self.windowNanoseconds < Self.growStartNanoseconds { self.windowNanoseconds = 0 }
        }
    }
}

extension Duration {
    /// This duration in whole nanoseconds (toward zero), clamped to `Int64`'s range (±292 years).
    var clampedNanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, carry) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow || carry { return seconds < 0 ? .min : .max }
        return total
    }
}
