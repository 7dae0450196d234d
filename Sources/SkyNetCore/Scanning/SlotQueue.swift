import DequeModule

/// The rules of a worker's slot loops (DESIGN.md §3, "Slot loops"): scans waiting for a loop, loops
/// waiting for a scan, and which scan each loop runs. Pure: the worker keeps it behind a lock, and
/// resumes, starts and cancels loops as its answers say.
///
/// A worker runs each scan that waits (on a timer, another actor, I/O) in one of at most `limit`
/// long-lived loops rather than in a task of its own. A loop takes the next scan, first come first
/// served, when it finishes one, and parks when there is none. A scan is known by its `Run`, a number
/// the worker gives each scan it submits. Cancelling a scan that is running cancels its loop: that
/// loop takes no other scan (``next(loop:)`` says `.retire`), so a cancel meant for one scan never
/// reaches the next, and another loop takes its place (``retired(loop:)``).
package struct SlotQueue<Item, Waiter> {
    /// A scan's number, given by the worker.
    package typealias Run = UInt64

    private enum Loop {
        /// Not started, or retired.
        case none
        /// Started, between scans.
        case idle
        /// Parked, waiting for a scan.
        case parked(Waiter)
        case running(Run)
        /// Cancelled: it ends after its scan.
        case retiring
    }

    private var queued: Deque<(run: Run, item: Item)> = []
    private var loops: [Loop]
    /// Whether the worker has stopped: loops take nothing more, and none starts.
    package private(set) var isClosed = false

    /// Room for `limit` loops (a worker's slots).
    package init(limit: Int) {
        precondition(limit >= 1, "a slot queue needs at least one loop")
        self.loops = Array(repeating: .none, count: limit)
        self.queued.reserveCapacity(limit)
    }

    /// Scans waiting for a loop.
    package var waiting: Int { self.queued.count }

    /// What to do with a scan just submitted.
    package enum Submitted {
        /// Resume the parked loop with it.
        case resume(Waiter, Run, Item)
        /// It waits; start a loop in slot `loop`, which takes it.
        case start(loop: Int)
        /// It waits for a busy loop.
        case queued
        /// The worker has stopped: nothing runs it.
        case closed(Item)
    }

    /// A scan to run: to a parked loop if there is one, else it waits (and a loop starts if there is
    /// room for one).
    package mutating func submit(_ item: Item, run: Run) -> Submitted {
        guard !self.isClosed else { return .closed(item) }
        var free: Int?
        for index in self.loops.indices {
            switch self.loops[index] {
            case .parked(let waiter):
                self.loops[index] = .running(run)
                return .resume(waiter, run, item)
            case .none where free == nil:
                free = index
            default:
                break
            }
        }
        self.queued.append((run, item))
        guard let free else { return .queued }
        self.loops[free] = .idle
        return .start(loop: free)
    }

    /// What a loop does next.
    package enum Next {
        case run(Run, Item)
        /// Nothing waits: park (``park(loop:_:)``).
        case wait
        /// Cancelled, or the worker stopped: end.
        case retire
    }

    /// The next scan for `loop`, which has finished its last one (or just started).
    package mutating func next(loop: Int) -> Next {
        if case .retiring = self.loops[loop] { return .retire }
        if self.isClosed {
            self.loops[loop] = .none
            return .retire
        }
        guard let (run, item) = self.queued.popFirst() else {
            self.loops[loop] = .idle
            return .wait
        }
        self.loops[loop] = .running(run)
        return .run(run, item)
    }

    /// Parks `loop` with `waiter` until a scan comes; returns what it takes instead when one came
    /// meanwhile, or `.retire`.
    package mutating func park(loop: Int, _ waiter: Waiter) -> Next {
        let next = self.next(loop: loop)
        if case .wait = next { self.loops[loop] = .parked(waiter) }
        return next
    }

    /// What cancelling a scan found.
    package enum Cancelled {
        /// It was waiting: it is out of the queue, and never runs.
        case waiting(Item)
        /// Loop `loop` runs it: cancel that loop, which retires after it.
        case running(loop: Int)
        /// Not here (finished, or never submitted).
        case none
    }

    /// Cancels scan `run`.
    package mutating func cancel(_ run: Run) -> Cancelled {
        if let index = self.queued.firstIndex(where: { $0.run == run }) {
            return .waiting(self.queued.remove(at: index).item)
        }
        for index in self.loops.indices {
            if case .running(run) = self.loops[index] {
                self.loops[index] = .retiring
                return .running(loop: index)
            }
        }
        return .none
    }

    /// `loop` has ended (it retired): its slot is free. Returns a slot to start a loop in when scans
    /// wait (a cancelled loop's successor).
    package mutating func retired(loop: Int) -> Int? {
        self.loops[loop] = .none
        guard !self.isClosed, !self.queued.isEmpty else { return nil }
        self.loops[loop] = .idle
        return loop
    }

    /// Stops: returns the parked loops (resume each to end it) and the scans that were waiting.
    package mutating func close() -> (parked: [Waiter], waiting: [Item]) {
        self.isClosed = true
        var parked: [Waiter] = []
        for index in self.loops.indices {
            if case .parked(let waiter) = self.loops[index] {
                parked.append(waiter)
                self.loops[index] = .none
            }
        }
        defer { self.queued.removeAll() }
        return (parked, self.queued.map(\.item))
    }
}
