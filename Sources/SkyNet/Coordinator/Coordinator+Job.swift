import SkyNetCore

// The coordinator's running job (``Coordinator/Job``), apart from the actor so that each file stays
// short.
extension Coordinator {
    /// Where a job's events go. Every payload has a fixed layout (a class reference, or
    /// `UnsafeContinuation`, which is frozen), so the enum is copied, tested and destroyed inline: with
    /// the streams' and a checked continuation's layouts (not fixed outside the standard library)
    /// each of those went through the runtime's value witnesses, and a checked continuation
    /// allocated its canary (~1,500 instructions a one-task job of ``run(_:)``).
    enum Delivery {
        /// ``submit(_:)``: every event, in batches.
        case stream(Sink<[CoordinatorEvent]>)
        /// ``submitWithFinalsApart(_:moreToCome:)``: every event, in batches whose final results are
        /// an array of their own.
        case apart(Sink<EventBatch>)
        /// ``run(_:)``: only the one final result, when the job ends. Resumed exactly once: by
        /// ``Coordinator/end(_:throwing:)``, which every path that ends a job calls once it has taken
        /// the job out of `job`, or by ``run(_:)`` itself when the job could not start (no job was
        /// made). ``Coordinator/close()`` ends a job still running. (A checked continuation would
        /// only have warned, had one been dropped: its caller waited forever either way.)
        case single(UnsafeContinuation<FinalResult, any Error>)
        /// ``runChain(_:next:)``: as ``single(_:)``, one final result at a time, which goes to the
        /// chain's `next` once the job has no task outstanding (``Coordinator/advance(_:in:)``).
        case chain(Chain)

        var streams: Bool {
            switch self {
            case .stream, .apart: true
            case .single, .chain: false
            }
        }

        var finalsApart: Bool {
            if case .apart = self { true } else { false }
        }
    }

    /// A stream's continuation, held by reference (see ``Delivery``).
    final class Sink<Element: Sendable> {
        let continuation: AsyncThrowingStream<Element, any Error>.Continuation

        init(_ continuation: AsyncThrowingStream<Element, any Error>.Continuation) {
            self.continuation = continuation
        }
    }

    /// The running job, held in `job` and changed in place there. A class: as a struct it held a
    /// `ContinuousClock.Instant` and continuations, whose layout is not fixed outside the standard
    /// library, so every copy, test and destruction of it went through the runtime's value witnesses
    /// (in the profile, about a tenth of a coordinator's reactor when tasks go one at a time).
    final class Job {
        let delivery: Delivery
        /// Whether `delivery` is `.stream` (every event) rather than `.single` (``run(_:)``) or
        /// `.chain` (``runChain(_:next:)``), asked for every final result and when the job ends.
        /// (Kept from when each `if case` on `Delivery` went through value witnesses, ~130
        /// instructions; a stored flag is still the cheapest.)
        let streams: Bool
        /// Tells this job from the next (a late cancellation of a ``run(_:)`` must not hit another).
        let serial: Int
        let start: ContinuousClock.Instant
        #if DEBUG
        var ledger: RetryLedger
        #else
        // Release builds skip the dynamic exclusivity check of the properties marked so here (about ten
        // per task); debug builds (every test) keep it. Why each is safe: docs/DESIGN.md §3, "Unchecked
        // exclusivity", and the line below.
        // Unchecked: a struct whose methods touch only itself and call nothing back.
        @exclusivity(unchecked) var ledger: RetryLedger
        #endif
        /// The first of `ledger.tasks` (in submission order) whose first SUBMIT has not gone out.
        #if DEBUG
        var nextToSend = 0
        #else
        // Unchecked: a plain value (as the other marked fields of a job).
        @exclusivity(unchecked) var nextToSend = 0
        #endif
        #if DEBUG
        var pending: [CoordinatorEvent] = []
        #else
        // Unchecked: appended to, or taken whole; nothing reaches the job meanwhile.
        @exclusivity(unchecked) var pending: [CoordinatorEvent] = []
        #endif
        /// A ``Delivery/apart`` job's final results not delivered yet (``deliver(_:)``).
        #if DEBUG
        var finals: [FinalResult?] = []
        #else
        // Unchecked: as `pending`.
        @exclusivity(unchecked) var finals: [FinalResult?] = []
        #endif
        /// Whether `delivery` is ``Delivery/apart``, asked for every final result.
        let finalsApart: Bool
        #if DEBUG
        var accepted = 0
        #else
        @exclusivity(unchecked) var accepted = 0
        #endif
        /// Why the broker was lost (``Coordinator/brokerLost(_:)``), until it answers again as a new
        /// process (``Coordinator/resendUnfinished(reason:)``); nil while it is not lost.
        #if DEBUG
        var lostBecause: String?
        #else
        @exclusivity(unchecked) var lostBecause: String?
        #endif
        var brokerLost: Bool { self.lostBecause != nil }
        /// Whether a first SUBMIT can go out: one is unsent, and the window has room
        /// (``Coordinator/submitWindow``).
        var windowHasRoom: Bool {
            self.ledger.unanswered < Coordinator.submitWindow && self.nextToSend < self.ledger.tasks.count
        }
        /// Whether ``Coordinator/sendMore()`` may have something to do.
        var maySend: Bool { self.brokerLost || self.throttled || self.windowHasRoom }
        /// Tasks added since the broker was lost wait for a turn of their own to be handed to the
        /// retry policy (``Coordinator/sendMore()``).
        var handingOver = false
        /// A ``run(_:)`` job's final result, kept until the job ends.
        var final: FinalResult?
        /// Its figures went to the broker at least once (with a heartbeat).
        var reported = false
        /// Whether the broker was asked, a heartbeat into the job, which of its kinds no worker serves.
        var kindsChecked = false
        /// Backpressure: the broker refused tasks for want of room (`--max-queued-per-coordinator`, or
        /// its whole queue). They wait in `held`, in order; from then on a task goes out only for a
        /// credit: each final result from the broker (room freed) and each ACCEPTED (there was room)
        /// gives one.
        #if DEBUG
        var throttled = false
        #else
        @exclusivity(unchecked) var throttled = false
        #endif
        /// More tasks may come (``submit(_:moreToCome:)``): the job does not end before
        /// ``endOfTasks()``, even with every task so far final.
        #if DEBUG
        var open = false
        #else
        @exclusivity(unchecked) var open = false
        #endif
        var held: [TaskID] = []
        var heldHead = 0
        var credits = 0

        init(delivery: consuming Delivery, serial: Int, start: ContinuousClock.Instant, ledger: consuming RetryLedger) {
            self.streams = delivery.streams
            self.finalsApart = delivery.finalsApart
            self.delivery = delivery
            self.serial = serial
            self.start = start
            self.ledger = ledger
        }

        /// A task's final result, for the caller: kept alone by a ``run(_:)`` job, else among its
        /// events (or beside them, ``Delivery/apart``).
        func deliver(_ result: consuming FinalResult) {
            if !self.streams {
                self.final = result
            } else if self.finalsApart {
                self.finals.append(result)
            } else {
                self.pending.append(.final(result))
            }
        }

        /// Counts a task's first ACCEPTED (or the RESULT that came in its place) for the caller's
        /// events. Only a job that streams them counts: a ``run(_:)`` or chain job's count went
        /// nowhere, and a chain's (one job for every task) had ``Coordinator/flushEvents()`` keep a
        /// timer armed for it, which woke and spun its reactor every 5 ms.
        func countAccepted() {
            if self.streams { self.accepted += 1 }
        }

        /// Whether events wait to be delivered (ACCEPTED counts apart).
        var hasEvents: Bool { !self.pending.isEmpty || !self.finals.isEmpty }
    }
}
