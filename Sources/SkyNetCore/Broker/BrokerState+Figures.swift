// What BrokerState keeps for watching it (DESIGN.md §9b): its millisecond clock, each kind's queue
// wait and run time, the oldest queued task, and the coordinators' jobs.
extension BrokerState {
    /// Queue depth per kind (kinds with tasks queued).
    package var depthByKind: [String: Int] {
        self.queues.compactMapValues { $0.live > 0 ? $0.live : nil }
    }

    // MARK: Clock

    /// Moves the state's clock to `now` (events that carry the time call it; the first sets the origin).
    package mutating func advance(to now: ContinuousClock.Instant) {
        // Every message of a BATCH comes with the same instant: converted once. Told by its bytes:
        // compared as an `Instant` (not frozen: the runtime's witnesses) with the last one, kept in
        // a class (retained and released), it cost ~140 instructions an event, twice a task.
        let bytes = InstantBytes(now)
        if bytes.isSame(as: self.clockLast) { return }
        self.clockLast = bytes
        guard self.clockInstants != nil else {
            self.clockInstants = ClockInstants(origin: now)
            self.clock = 0
            return
        }
        self.clock = self.milliseconds(at: now)
    }

    /// The first instant the state was told of (the origin of ``clock``), if any.
    package var clockOrigin: ContinuousClock.Instant? { self.clockInstants?.origin }

    /// `now` on the state's clock: milliseconds since the origin, wrapping after 49 days (ages are
    /// differences, taken with wrapping arithmetic).
    package func milliseconds(at now: ContinuousClock.Instant) -> UInt32 {
        self.clockInstants?.milliseconds(at: now) ?? 0
    }

    /// Milliseconds from `start` to `end` on the state's clock; 0 when `end` is earlier (an event
    /// stamped before the last one).
    package static func elapsed(from start: UInt32, to end: UInt32) -> UInt32 {
        let elapsed = end &- start
        return elapsed > UInt32.max / 2 ? 0 : elapsed
    }

    // MARK: Kinds

    /// The figures of `kind`, made on first use.
    package mutating func kindFigures(for kind: String) -> KindFigures {
        if let last = self.lastKindFigures, last.kind == kind { return last.figures }
        let figures: KindFigures
        if let known = self.figuresByKind[kind] {
            figures = known
        } else if self.figuresByKind.count < Self.maxKindFigures {
            figures = KindFigures()
            self.figuresByKind[kind] = figures
        } else {
            figures = self.figuresByKind[Self.otherKinds] ?? KindFigures()
            self.figuresByKind[Self.otherKinds] = figures
        }
        self.lastKindFigures = (kind, figures)
        return figures
    }

    /// Records a RESULT's run time in `kind`'s figures: where they lie when `kind` is the last one's
    /// (the usual case; returned by ``kindFigures(for:)``, they were retained and released).
    mutating func recordRunTime(microseconds: UInt32, of kind: String) {
        if self.lastKindFigures?.kind == kind {
            self.lastKindFigures?.figures.runTime.record(microseconds: UInt64(microseconds))
        } else {
            self.kindFigures(for: kind).runTime.record(microseconds: UInt64(microseconds))
        }
    }

    /// Each kind's queue and figures as of `now`: the oldest queued task is found among the first
    /// tasks of each coordinator's lane (a lane is first in, first out), not by visiting every task.
    package func kindFigures(now: ContinuousClock.Instant) -> [String: BrokerStatus.Kind] {
        let clock = self.milliseconds(at: now)
        var kinds: [String: BrokerStatus.Kind] = [:]
        for (kind, figures) in self.figuresByKind {
            kinds[kind] = BrokerStatus.Kind(
                queued: 0,
                oldestQueuedSeconds: 0,
                queueWait: figures.queueWait,
                runTime: figures.runTime
            )
        }
        for (kind, queue) in self.queues where queue.live > 0 {
            var oldest: UInt32 = 0
            queue.heads(perLane: 64) { item in
                guard let queuedAt = self.tasks.queuedAt(slot: item.slot, ticket: item.ticket) else { return }
                oldest = max(oldest, Self.elapsed(from: queuedAt, to: clock))
            }
            // A kind past the 256th has no figures of its own: it counts under `(other)`.
            let key = self.figuresByKind[kind] == nil ? Self.otherKinds : kind
            var entry =
                kinds[key]
                ?? BrokerStatus.Kind(queued: 0, oldestQueuedSeconds: 0, queueWait: .init(), runTime: .init())
            entry.queued += queue.live
            entry.oldestQueuedSeconds = max(entry.oldestQueuedSeconds, Double(oldest) / 1000)
            kinds[key] = entry
        }
        return kinds
    }

    // MARK: Jobs

    /// A coordinator's FIGURES about its job: kept for STATUS; a job it reported before under
    /// another serial has ended.
    package mutating func coordinatorJob(_ id: PeerID, _ figures: JobFigures, now: ContinuousClock.Instant) {
        let entry = self.seenCoordinator(id, now: now)
        if let previous = entry.job, previous.serial != figures.serial {
            self.jobEnded(EndedJob(coordinator: entry.id, figures: previous, ended: now, left: false))
        }
        entry.job = figures
    }

    package mutating func jobEnded(_ job: EndedJob) {
        let figures = job.figures
        self.endedTotals.add(
            tasks: figures.tasks,
            completed: figures.completed,
            failed: figures.failed,
            cancelled: figures.cancelled,
            ended: true
        )
        self.endedJobs.append(job)
        if self.endedJobs.count > Self.endedJobsKept { self.endedJobs.removeFirst() }
    }
}
