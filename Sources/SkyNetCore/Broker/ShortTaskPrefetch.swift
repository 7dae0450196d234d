/// Whether the broker lends a worker tasks beyond its slots: only while that worker's tasks are short.
///
/// A worker's slot that frees up waits a round trip for its next TASK (its RESULT to the broker, the
/// TASK back): some 100–400 µs on a busy 2-core machine, a quarter of a 1 ms task. A task lent ahead
/// waits in the worker's first-come queue instead and starts the moment a slot frees. That pays only
/// while tasks are short, and it costs only then a little: a lent task waits about one short task,
/// and is not there for another worker that frees up meanwhile. So the broker lends half the
/// worker's capacity (rounded up; a quarter covered a round trip too seldom with 16 slots of 1 ms
/// tasks) once the worker's recent tasks run under ``engageBelow`` on average, and stops once they
/// average over ``releaseAbove`` (two 50 ms tasks after a run of short ones are enough). A worker
/// left with no task starts over (``idle()``). What it bounds: when long tasks
/// follow short ones with no pause between (in one job, or jobs back to back), at most that half
/// of them wait behind a long one, once.
///
/// Tiny tasks (under ``tinyBelow`` on average, until over ``tinyAbove``: a no-op runs in a
/// microsecond or two) are lent more: each slot as many as run in ``tinyHeldMicroseconds`` at the
/// average, 2 to ``tinyMostPerSlot`` (at most ``mostLent`` in all). Such a worker finishes all its
/// slots' tasks well within one round trip, and until the next BATCH of TASKs comes it waits; the
/// broker meanwhile waits for its RESULTs: the two take turns, each idle while the other works.
/// Lending several slots' worth keeps BATCHes in flight both ways. Twice the capacity (the seventh
/// round) took 64 slots of no-op tasks from 206,000 to 259,000 tasks/s; the fourteenth round measured
/// more: 2, 4, 8, 16 and 32 per slot, 1 worker × 64 slots, ~290,000, 327,000, 383,000, 440,000–488,000
/// and 656,000 tasks/s. What a lent task waits for a slot stays bounded by the same budget: at
/// most about ``tinyHeldMicroseconds`` of the worker's tiny tasks ahead of it per slot.
///
/// Pure: the ``BrokerState`` tells it each RESULT's run time, as the worker measured it.
package struct ShortTaskPrefetch: Equatable, Sendable {
    /// Lending starts when the average run falls below this (µs)…
    package static let engageBelow: UInt32 = 5_000
    /// …and stops when it rises above this (µs).
    package static let releaseAbove: UInt32 = 10_000
    /// Results a worker returns before its average counts.
    package static let warmUp: UInt8 = 8
    /// Tasks count as tiny when the average falls below this (µs)…
    package static let tinyBelow: UInt32 = 50
    /// …and no longer once it rises above this (µs).
    package static let tinyAbove: UInt32 = 100
    /// Work held per slot for a worker of tiny tasks (µs at the average): 400 µs covers a credit
    /// cycle's round trip on a busy 2-core machine (100–400 µs).
    package static let tinyHeldMicroseconds: UInt32 = 400
    /// Most tiny tasks lent per slot (32 at an average of 12 µs or less)…
    package static let tinyMostPerSlot = 32
    /// …and in all, whatever the capacity: four full BATCHes of TASKs.
    package static let mostLent = 4 * Batch.maxMessages

    /// The average run time, µs: each result moves it an eighth of the way.
    package private(set) var average: UInt32 = 0
    private var seen: UInt8 = 0
    /// Whether the worker's tasks are short now.
    package private(set) var lending = false
    /// Whether they are tiny (lent ``tinyPerSlot`` per slot).
    package private(set) var tiny = false

    /// Tiny tasks lent per slot at the current average: what runs in ``tinyHeldMicroseconds``,
    /// 2…``tinyMostPerSlot``.
    package var tinyPerSlot: Int {
        min(Self.tinyMostPerSlot, max(2, Int(Self.tinyHeldMicroseconds / max(self.average, 1))))
    }

    package init() {}

    /// A task ran `microseconds` on the worker (completed, failed or timed out; a cancelled one says
    /// nothing about how long tasks take).
    package mutating func ran(microseconds: UInt32) {
        if self.seen == 0 {
            self.average = microseconds
        } else {
            // In 64 bits: the sum cannot overflow.
            self.average = UInt32((UInt64(self.average) * 7 + UInt64(microseconds)) / 8)
        }
        if self.seen < Self.warmUp { self.seen += 1 }
        if self.average > Self.releaseAbove {
            self.lending = false
        } else if self.seen >= Self.warmUp, self.average < Self.engageBelow {
            self.lending = true
        }
        if !self.lending || self.average > Self.tinyAbove {
            self.tiny = false
        } else if self.average < Self.tinyBelow {
            self.tiny = true
        }
    }

    /// The worker has no task left (its queue ran dry, a job ended): it starts over, and lends again
    /// only after eight short results. So a job of long tasks that follows a job of short ones, with
    /// the worker idle between, is not lent to.
    package mutating func idle() {
        if self.seen != 0 { self = ShortTaskPrefetch() }
    }

    /// The tasks lent beyond `capacity` now: half of it, rounded up, while lending; ``tinyPerSlot``
    /// times it (at most ``mostLent``) while the tasks are tiny.
    package func extra(capacity: Int) -> Int {
        guard self.lending else { return 0 }
        let capacity = max(0, capacity)
        return self.tiny ? min(self.tinyPerSlot * capacity, Self.mostLent) : (capacity + 1) / 2
    }
}
