import CZMQ
import Glibc

// Timers: scheduled, kept (armed and disarmed again and again) and cancelled, the timerfd armed for
// the next one, and those due fired. The public entry points assert that they run on the reactor
// thread; the internal helpers (`due`, `earliestDue`, `pollTimeout`, `arm(_:)`, `fireDueTimers`) are
// for them and for the loop, which runs there, and nothing else in the module calls them (they were
// private to Reactor.swift before they moved here).
extension Reactor {
    /// Runs `body` on the reactor thread after `delay`, and then every `interval` if one is given.
    @discardableResult
    public func schedule(
        after delay: Duration,
        every interval: Duration? = nil,
        _ body: @escaping () -> Void
    )
        -> TimerID
    {
        self.assertOnReactor()
        let id = self.nextID
        self.nextID += 1
        let due = self.due(after: delay.clampedNanoseconds)
        self.timers.append(
            Timer(id: id, due: due, interval: interval.map { max($0.clampedNanoseconds, 0) }, body: body)
        )
        if self.nextDue.map({ due < $0 }) ?? true { self.nextDue = due }
        return TimerID(raw: id)
    }

    /// A one-shot timer made once and armed again and again (``arm(_:after:)``, ``disarm(_:)``),
    /// disarmed at first and after it fires; ``cancel(_:)`` ends it. For a timer armed again and again
    /// (the broker's ACCEPTED hold, anew every round trip, ``rearm(_:after:)``): ``schedule(after:every:_:)`` and
    /// ``cancel(_:)`` add and remove a timer and retain and release its closure each time (~430
    /// instructions), arming finds it and sets its instant.
    public func makeTimer(_ body: @escaping () -> Void) -> TimerID {
        self.assertOnReactor()
        let id = self.nextID
        self.nextID += 1
        self.timers.append(Timer(id: id, due: .zero, interval: nil, body: body, kept: true, armed: false))
        return TimerID(raw: id)
    }

    /// Arms a timer from ``makeTimer(_:)`` to fire after `delay`; one armed already keeps its instant.
    /// A no-op for a timer that was cancelled.
    public func arm(_ timer: TimerID, after delay: Duration) {
        self.assertOnReactor()
        guard let index = self.timers.firstIndex(where: { $0.id == timer.raw }), !self.timers[index].armed else {
            return
        }
        self.setDue(of: index, after: delay)
    }

    /// Arms a timer from ``makeTimer(_:)`` to fire `delay` from now, whether or not it is armed (an
    /// armed one's instant moves). For a timer that need not be disarmed when what it waits for ends
    /// first: left armed, it fires once with nothing to do, unless it is armed anew before then. A
    /// no-op for a timer that was cancelled.
    public func rearm(_ timer: TimerID, after delay: Duration) {
        self.assertOnReactor()
        guard let index = self.timers.firstIndex(where: { $0.id == timer.raw }) else { return }
        // Moved later, the next timer's instant may now be another's.
        let wasNext = self.timers[index].armed && self.timers[index].due == self.nextDue
        self.setDue(of: index, after: delay)
        if wasNext && self.timers[index].due != self.nextDue { self.nextDue = self.earliestDue() }
    }

    /// Arms the kept timer at `index` for `delay` from now.
    private func setDue(of index: Int, after delay: Duration) {
        if self.lastArmDelay.delay != delay { self.lastArmDelay = (delay, delay.clampedNanoseconds) }
        let due = self.due(after: self.lastArmDelay.nanoseconds)
        self.timers[index].due = due
        self.timers[index].armed = true
        if self.nextDue.map({ due < $0 }) ?? true { self.nextDue = due }
    }

    /// Disarms a timer from ``makeTimer(_:)`` (a no-op if it is not armed, or was cancelled).
    public func disarm(_ timer: TimerID) {
        self.assertOnReactor()
        guard let index = self.timers.firstIndex(where: { $0.id == timer.raw }), self.timers[index].armed else {
            return
        }
        self.timers[index].armed = false
        if self.timers[index].due == self.nextDue { self.nextDue = self.earliestDue() }
    }

    /// Cancels a timer (or a hook from ``beforePoll(_:)``); a no-op if it already fired (one-shot) or
    /// was cancelled.
    public func cancel(_ timer: TimerID) {
        self.assertOnReactor()
        // An id is a timer's or a hook's, never both (one counter numbers them).
        if let index = self.timers.firstIndex(where: { $0.id == timer.raw }) {
            let removed = self.timers.remove(at: index)
            if removed.armed && removed.due == self.nextDue { self.nextDue = self.earliestDue() }
        } else if let index = self.beforePollHooks.firstIndex(where: { $0.id == timer.raw }) {
            self.retire(self.beforePollHooks.remove(at: index).body)
        }
    }

    /// Now plus `delay` nanoseconds; a negative delay is now. So every instant is at or after the
    /// clock's start, and subtracting two of them cannot overflow.
    func due(after delay: Int64) -> Int64 { Self.adding(self.monotonicNow, max(delay, 0)) }

    /// `instant + delay` for a delay of zero or more, saturating: a delay of centuries is a timer that
    /// never fires, not a trap.
    static func adding(_ instant: Int64, _ delay: Int64) -> Int64 {
        let (sum, overflow) = instant.addingReportingOverflow(delay)
        return overflow ? .max : sum
    }

    /// The earliest `due` among the armed timers, read in place (`min(by:)` copied each timer out, retaining
    /// and releasing its body; `lazy.map(\.due).min()` read a key path per timer).
    func earliestDue() -> Int64? {
        var earliest: Int64?
        for index in self.timers.indices where self.timers[index].armed {
            let due = self.timers[index].due
            if earliest.map({ due < $0 }) ?? true { earliest = due }
        }
        return earliest
    }

    /// The poll's timeout in milliseconds: none (-1) when the timerfd will wake it for the next timer,
    /// which it arms here when that changed; the next timer rounded up to a millisecond otherwise.
    func pollTimeout() -> Int {
        guard let next = self.nextDue else { return -1 }
        // The timerfd is armed for the next timer already (due or not, it wakes the poll then): no
        // need to read the clock (~40 instructions a turn). Polling on, the early wake-up needs it.
        if self.armedDue == next && self.spin.limitNanoseconds == 0 { return -1 }
        let now = self.monotonicNow
        if next <= now { return 0 }
        let remaining = next - now
        // Polling on: wake a little early and poll the rest of the way (``waitForEvents()``), so the
        // timer fires on time rather than a wake-up's latency late.
        let wakeAt = self.spin.limitNanoseconds > 0 ? next - Self.earlyWake : next
        if wakeAt <= now { return 0 }
        if self.armedDue == wakeAt || self.arm(wakeAt) { return -1 }
        // Round up, so a timer is never polled for just before it is due; at most poll(2)'s longest.
        let milliseconds = remaining / 1_000_000 + (remaining % 1_000_000 == 0 ? 0 : 1)
        return Int(min(milliseconds, Int64(Int32.max)))
    }

    /// Arms the timerfd for `due` on the monotonic clock; false when it could not be.
    func arm(_ due: Int64) -> Bool {
        var spec = itimerspec()
        spec.it_value.tv_sec = Int(due / 1_000_000_000)
        spec.it_value.tv_nsec = Int(due % 1_000_000_000)
        // A zero it_value would disarm it: a due instant of exactly 0 is in the past anyway.
        if spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0 { spec.it_value.tv_nsec = 1 }
        guard timerfd_settime(self.timerFD, Int32(TFD_TIMER_ABSTIME), &spec, nil) == 0 else { return false }
        self.armedDue = due
        return true
    }

    func fireDueTimers() {
        guard let nextDue = self.nextDue else { return }
        // The timerfd armed for the next timer has not fired (it would have left `armedDue` nil in
        // this turn's poll): nothing was due then, and the clock is not read (~40 instructions a
        // turn). One due since wakes the next poll at once.
        if self.armedDue == nextDue { return }
        let now = self.monotonicNow
        guard nextDue <= now else { return }
        var due: [() -> Void] = []
        var index = 0
        while index < self.timers.count {
            guard self.timers[index].armed, self.timers[index].due <= now else {
                index += 1
                continue
            }
            due.append(self.timers[index].body)
            if let interval = self.timers[index].interval {
                // Skip missed periods rather than firing a burst after a stall.
                var next = Self.adding(self.timers[index].due, interval)
                if next <= now { next = Self.adding(now, interval) }
                self.timers[index].due = next
                index += 1
            } else if self.timers[index].kept {
                self.timers[index].armed = false
                index += 1
            } else {
                self.timers.remove(at: index)
            }
        }
        self.nextDue = self.earliestDue()
        for body in due { body() }
    }
}
