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
        if self.clockOrigin == nil { self.clockOrigin = now }
        self.clock = self.milliseconds(at: now)
    }

    /// `now` on the state's clock: milliseconds since the origin, wrapping after 49 days (ages are
    /// differences, taken with wrapping arithmetic).
    package func milliseconds(at now: ContinuousClock.Instant) -> UInt32 {
        guard let origin = self.clockOrigin else { return 0 }
        return UInt32(truncatingIfNeeded: (now - origin).milliseconds)
    }

    /// Milliseconds from `start` to `end` on the state's clock; 0 when `end` is earlier (an event
    /// stamped before the last one).
    package static func elapsed(from start: UInt32, to end: UInt32) -> UInt32 {
        let elapsed = end &- start
        return elapsed > UInt32.max / 2 ? 0 : elapsed
    }

    // MARK: Kinds

    /// The figures of `kind`, made on first use.
    package mutating func stats(for kind: String) -> KindStats {
        if let last = self.lastKindStats, last.kind == kind { return last.stats }
        let stats: KindStats
        if let known = self.kindStats[kind] {
            stats = known
        } else if self.kindStats.count < Self.maxKindStats {
            stats = KindStats()
            self.kindStats[kind] = stats
        } else {
            stats = self.kindStats[Self.otherKinds] ?? KindStats()
            self.kindStats[Self.otherKinds] = stats
        }
        self.lastKindStats = (kind, stats)
        return stats
    }

    /// Each kind's queue and figures as of `now`: the oldest queued task is found among the first
    /// tasks of each coordinator's lane (a lane is first in, first out), not by visiting every task.
    package func kindFigures(now: ContinuousClock.Instant) -> [String: BrokerStatus.Kind] {
        let clock = self.milliseconds(at: now)
        var figures: [String: BrokerStatus.Kind] = [:]
        for (kind, stats) in self.kindStats {
            figures[kind] = BrokerStatus.Kind(
                queued: 0,
                oldestQueuedSeconds: 0,
                queueWait: stats.queueWait,
                runTime: stats.runTime
            )
        }
        for (kind, queue) in self.queues where queue.live > 0 {
            var oldest: UInt32 = 0
            queue.heads(perLane: 64) { item in
                guard let queuedAt = self.tasks.queuedAt(item.id, ticket: item.ticket) else { return }
                oldest = max(oldest, Self.elapsed(from: queuedAt, to: clock))
            }
            // A kind past the 256th has no stats of its own: it counts under `(other)`.
            let key = self.kindStats[kind] == nil ? Self.otherKinds : kind
            var entry =
                figures[key]
                ?? BrokerStatus.Kind(queued: 0, oldestQueuedSeconds: 0, queueWait: .init(), runTime: .init())
            entry.queued += queue.live
            entry.oldestQueuedSeconds = max(entry.oldestQueuedSeconds, Double(oldest) / 1000)
            figures[key] = entry
        }
        return figures
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
