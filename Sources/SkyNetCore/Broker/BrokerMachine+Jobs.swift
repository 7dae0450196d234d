import Logging

// Detached jobs (durable mode): the job, not a connected coordinator, owns its tasks; the broker
// retries their failed attempts itself, keeps their final results on disk, and answers `skynet
// results` and `skynet cancel`. The bookkeeping is ``DetachedJobs``; these are its rules.
extension BrokerMachine {
    /// A SUBMIT for a detached job: the job owns the task; ACCEPTED goes to the sender once the
    /// task is on disk.
    package mutating func submitToJob(
        _ id: TaskID,
        attempt: UInt32,
        _ envelope: TaskEnvelope,
        input: [UInt8],
        job: TaskID,
        from peer: PeerID,
        key: String?,
        now: ContinuousClock.Instant
    ) {
        guard self.durable else {
            self.emit(
                .toCoordinator(
                    peer,
                    .rejected(id, .invalid, text: "detached jobs need a durable broker (start it with --journal)")
                )
            )
            return
        }
        let owner = PeerID.job(job)
        // With CURVE a job belongs to the key that first submitted to it: to any other it does not
        // exist, and cannot be added to.
        if self.jobs.exists(job), !self.jobs.isVisible(job, to: key) {
            self.emit(.toCoordinator(peer, .rejected(id, .invalid, text: "no such job \(job)")))
            return
        }
        if !self.jobs.exists(job), let key { self.journal(.jobOwner(job: job, key: key)) }
        if self.jobs.hasResult(id, of: job) {
            // A resend of a task that already finished: it was accepted.
            self.emit(.toCoordinator(peer, .accepted(id, attempt: attempt, requeued: false)))
            return
        }
        self.state.registerJob(owner, now: now)
        let isNew = self.state.tasks[id] == nil
        let actions = self.state.submit(
            id,
            attempt: attempt,
            envelope: envelope,
            input: TaskBytes(input),
            from: owner,
            now: now
        )
        if isNew, self.state.tasks[id] != nil {
            self.jobs.taskPending(id, of: job, kind: envelope.kind, input: input, owner: key, now: now)
            self.journal(.submit(id, coordinator: owner, attempt: attempt, envelope, input: input))
        }
        // The answers to the SUBMIT go to its sender (once on disk).
        for action in actions {
            switch action {
            case .accepted(owner, let id, let attempt, let requeued, _):
                let message = WireMessage.accepted(id, attempt: attempt, requeued: requeued)
                self.pipeline.deferUntilCommitted(message.encode(), to: peer)
            case .rejected(owner, let id, let reason, let text):
                self.emit(.toCoordinator(peer, .rejected(id, reason, text: text)))
            default:
                self.apply([action], now: now)
            }
        }
    }

    /// A detached job's attempt ended on a worker: a failure with attempts left runs again (the
    /// broker retries for a job, at once); anything else is the task's final result.
    package mutating func jobAttemptEnded(
        _ job: TaskID,
        _ entry: BrokerState.TaskEntry,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: [UInt8],
        now: ContinuousClock.Instant
    ) {
        guard
            let next = self.jobs.nextAttempt(
                after: status,
                attempt: entry.attempt,
                maxAttempts: entry.envelope.maxAttempts,
                of: job
            )
        else {
            self.finishJobTask(job, entry.id, attempt: entry.attempt, status, meta, body: body)
            return
        }
        let actions = self.state.submit(
            entry.id,
            attempt: next,
            envelope: entry.envelope,
            input: entry.input,
            from: .job(job),
            now: now
        )
        if self.state.tasks[entry.id] != nil { self.journal(.attempt(entry.id, next)) }
        self.apply(actions.filter { if case .accepted = $0 { false } else { true } }, now: now)
        self.logger.debug("job task retried", metadata: ["task.id": "\(entry.id)", "attempt": "\(next)"])
    }

    /// Journals a detached job's final result; it is kept and sent to followers once on disk.
    package mutating func finishJobTask(
        _ job: TaskID,
        _ id: TaskID,
        attempt: UInt32,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: [UInt8]
    ) {
        guard self.durable, let task = self.jobs.pendingTask(id, of: job) else {
            self.logger.error("a detached job's result has no task to go with; dropped", metadata: ["task.id": "\(id)"])
            return
        }
        self.logger.debug("job task finished", metadata: ["task.id": "\(id)", "status": "\(status)"])
        let frames = WireMessage.jobResult(
            job: job,
            id,
            attempt: attempt,
            status,
            meta,
            body: body,
            kind: task.kind,
            input: task.input
        ).encode()
        self.journal(.result(id, coordinator: .job(job), frames: frames))
        self.pipeline.deferUntilCommitted(frames, to: .job(job), result: id)
    }

    /// A job's final result is on disk: keep it and pass it to the job's followers (and, when it was
    /// the last, the job's status, which ends their follow).
    package mutating func jobResultCommitted(
        _ job: TaskID,
        _ id: TaskID,
        frames: [[UInt8]],
        now: ContinuousClock.Instant
    ) {
        guard let committed = self.jobs.resultCommitted(id, of: job, frames: frames, now: now) else { return }
        for follower in committed.followers { self.emit(.frames(follower, frames, keep: nil)) }
        if let status = committed.finalStatus {
            for follower in committed.followers {
                self.emit(.toCoordinator(follower, .jobReply(job: job, json: status.json())))
            }
        }
    }

    /// The job's account; an error when this broker keeps no jobs.
    package func jobStatus(_ job: TaskID, for requester: String? = nil) -> DetachedJobStatus {
        guard self.durable else {
            return DetachedJobStatus(job: "\(job)", error: "this broker keeps no jobs (start it with --journal)")
        }
        return self.jobs.status(of: job, for: requester)
    }

    /// Sends a job's results so far, then its status; a follower also gets the rest as they come.
    package mutating func answerJobQuery(_ job: TaskID, follow: Bool, from peer: PeerID, key: String?) {
        guard self.durable else {
            self.emit(.toCoordinator(peer, .jobReply(job: job, json: self.jobStatus(job).json())))
            return
        }
        let (results, status) = self.jobs.query(job, follow: follow, from: peer, requester: key)
        for frames in results { self.emit(.frames(peer, frames, keep: nil)) }
        self.emit(.toCoordinator(peer, .jobReply(job: job, json: status.json())))
    }

    /// Cancels a job's unfinished tasks: queued ones end at once, running ones on their workers.
    package mutating func cancelJob(_ job: TaskID, from peer: PeerID, key: String?, now: ContinuousClock.Instant) {
        if self.jobs.cancel(job, requester: key) {
            let owner = PeerID.job(job)
            for id in self.state.tasks(of: owner) { self.apply(self.state.cancel(id, from: owner), now: now) }
            self.logger.info("job cancelled", metadata: ["job": "\(job)"])
        }
        self.emit(.toCoordinator(peer, .jobReply(job: job, json: self.jobStatus(job, for: key).json())))
    }

    /// Names a job this broker holds and `key` may see (journaled with it); anything else is
    /// ignored: the submitter sends the name once its first task was accepted.
    package mutating func nameJob(_ job: TaskID, _ name: String, key: String?) {
        guard self.durable, self.jobs.exists(job), self.jobs.isVisible(job, to: key) else { return }
        if self.jobs.name(job, name) { self.journal(.jobName(job: job, name: name)) }
    }

    /// Forgets finished jobs whose last result is older than the retention (the journal too).
    package mutating func expireJobs(now: ContinuousClock.Instant) {
        let coordinators = self.state.coordinators
        let forgotten = self.jobs.expire(now: now) { job in (coordinators[.job(job)]?.taskCount ?? 0) > 0 }
        for (job, results) in forgotten {
            for id in results { self.journal(.forget(id)) }
            self.state.forgetJob(.job(job))
            self.logger.info("finished job forgotten", metadata: ["job": "\(job)", "results": "\(results.count)"])
        }
    }
}
