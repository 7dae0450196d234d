import SkyNetCore
import Logging
import ZeroMQ

// What comes back: the broker's messages and local scans' results go through the job's
// ``RetryLedger``, whose decisions become retries (after their backoff) and events for the caller,
// delivered in batches; the job ends after its last task's final result.
extension Coordinator {
    func drain() {
        guard let connection = self.connection else { return }
        // One reading of the clock for everything this turn received (it was all there by now).
        let now = ContinuousClock.now
        connection.receiveMessages { result, frames in
            self.handleResult(result, frames, now: now)
        } accepted: { id, attempt, requeued in
            self.handleAccepted(id, attempt: attempt, requeued: requeued, now: now)
        } _: { message in
            self.handle(message, now: now)
        }
        self.sendMore()
        self.flushEvents()
        // The connection that was read (not `self.connection` taken again, a retain and a release):
        // one that replaced it during the turn retries what it parks on its own timer.
        connection.flush()
    }

    func handle(_ message: WireMessage, now: ContinuousClock.Instant) {
        // Most messages (RESULTs, ACCEPTEDs) say nothing about the connection: the signal is looked
        // at apart, only when there is one (a switch over the optional here copied it, nil and all,
        // at each of its cases: four copies per RESULT).
        if let signal = self.liveness.hear(message, now: now) {
            guard self.follow(signal) else { return }
        } else if self.leaderless, !message.isStatusReply {
            // A STATUS reply comes from a standby too; anything else is a leader's.
            self.leaderAnswered()
        }
        let job = self.job
        switch message {
        case .accepted(let id, let attempt, let requeued):
            self.accepted(id, attempt: attempt, requeued: requeued)
        case .acceptedList(let tasks):
            for task in tasks { self.accepted(task.id, attempt: task.attempt, requeued: false) }
        case .rejected(let id, let reason, let text):
            if reason == .queueFull, let job, job.ledger.unsend(id) {
                // Backpressure, not failure: the task waits here until the broker has room.
                job.held.append(id)
                if !job.throttled {
                    job.throttled = true
                    self.logger.info("the broker is full for this coordinator; sending the rest as it drains")
                    job.pending.append(.slowedDown(reason: text))
                }
                return
            }
            self.apply(job?.ledger.fail(id, reason: "rejected by broker: \(reason) (\(text))", system: "broker"))
        case .statusReply(let json):
            self.statusReplied(json)
        case .progress, .heartbeat:
            break
        default:
            self.logger.warning("unexpected \(message.commandName) from broker dropped")
        }
    }

    /// An ACCEPTED, checked and read in place (``DealerConnection/receiveMessages(results:accepted:_:)``):
    /// what ``handle(_:now:)`` does with one decoded.
    func handleAccepted(_ id: TaskID, attempt: UInt32, requeued: Bool, now: ContinuousClock.Instant) {
        self.heardFromLeader(now: now)
        self.accepted(id, attempt: attempt, requeued: requeued)
    }

    /// What ``BrokerLiveness/hear(_:now:)`` and ``handle(_:now:)`` do with any message that is neither
    /// a HEARTBEAT, a DISCONNECT nor a STATUS reply (the in-place readers' messages).
    private func heardFromLeader(now: ContinuousClock.Instant) {
        self.liveness.heard(now: now)
        if self.leaderless { self.leaderAnswered() }
    }

    private func accepted(_ id: TaskID, attempt: UInt32, requeued: Bool) {
        guard let job else { return }
        if requeued {
            if job.ledger.requeued(id, attempt: attempt), let task = job.ledger.task(id) {
                job.pending.append(.requeued(task, attempt: attempt))
            }
        } else if job.ledger.accepted(id) {
            job.countAccepted()
            self.trace?.record("accepted", id, broker: self.brokers.current)
            if job.throttled { job.credits += 1 }
        }
    }

    /// A RESULT, checked and read in place (``DealerConnection/receiveMessages(results:accepted:_:)``): only
    /// what the job keeps of it is copied out (its system's name, when it is not the last one's, and
    /// a final result's output). Decoded into a message, it cost its output's array even when the
    /// result was a duplicate, and the message's copies and destruction (the receive path of
    /// `skynet submit` went from ~3,570 to ~3,120 instructions a task).
    func handleResult(_ result: ResultView, _ frames: WireMessage.RawFrames, now: ContinuousClock.Instant) {
        self.heardFromLeader(now: now)
        guard let job = self.job else { return }
        let id = result.taskID
        if job.throttled { job.credits += 1 }
        // The broker sends no ACCEPTED for a task whose RESULT comes first: the RESULT says it.
        if job.ledger.accepted(id) { job.countAccepted() }
        let system = ResultView.system(of: frames, previous: &self.lastSystem)
        self.trace?.record("result", id, broker: self.brokers.current, status: "\(result.status)", system: system)
        if case .completed = result.status {
            // The final result goes straight into the job's events (see `recordCompleted`).
            let output = frames[2]
            let completion = job.ledger.recordCompleted(id, attempt: result.attempt, system: system, output: output) {
                job.deliver($0)
            }
            switch completion {
            case .final: self.finishIfDone()
            case .duplicate: self.apply(.duplicate, id: id)
            case .stale: self.apply(.stale)
            }
            return
        }
        let outcome = ScanOutcome(status: result.status, body: Array(frames[2]))
        self.apply(
            job.ledger.record(
                id,
                attempt: result.attempt,
                outcome: outcome,
                system: system,
                remoteAllowed: !job.brokerLost
            ),
            id: id,
            attempt: result.attempt,
            system: system,
            outcome: outcome
        )
    }

    /// What a message said about the connection, carried out. Returns whether the message itself is
    /// to be handled too.
    private func follow(_ signal: BrokerLiveness.Signal) -> Bool {
        switch signal {
        case .answered(let restarted) where restarted || self.switched:
            self.leaderAnswered()
            self.brokerRestarted()
            return false
        case .restarted:
            self.leaderAnswered()
            self.brokerRestarted()
            return false
        case .notLeader(let hint):
            self.notLeader(hint: hint)
            return false
        case .forgotten(let text):
            // The broker forgot us (we were silent too long): it dropped our tasks, so send them again.
            self.logger.warning("broker forgot this coordinator", metadata: ["reason": "\(text)"])
            self.resendUnfinished(reason: "the broker had forgotten this coordinator")
            return false
        case .refused(let text):
            self.refused(text)
            return false
        case .leaving(let reason, let text):
            self.logger.warning("broker said disconnect", metadata: ["reason": "\(reason): \(text)"])
            if reason == .shutdown {
                if self.brokers.isGroup {
                    self.switchBroker(because: "the broker at \(self.brokers.current) stopped")
                } else {
                    self.brokerLost("broker stopped: \(text)")
                }
            }
            return false
        case .answered:
            self.leaderAnswered()
            return true
        }
    }

    /// Carries out a ledger decision and records the events the user sees.
    func apply(
        _ decision: consuming RetryLedger.Decision?,
        id: TaskID? = nil,
        attempt: UInt32 = 0,
        system: String = "",
        outcome: ScanOutcome? = nil
    ) {
        // Taken and consumed, not copied: a final result moves on into the job's events.
        guard let job = self.job, let decision = decision.take() else { return }
        switch consume decision {
        case .final(let result):
            job.deliver(result)
        case .retryLocal(let task):
            self.retry(task, placement: .local, failedAttempt: attempt, system: system, outcome: outcome, in: job)
        case .retryRemote(let task):
            self.retry(task, placement: .remote, failedAttempt: attempt, system: system, outcome: outcome, in: job)
        case .duplicate:
            self.logger.debug(
                "duplicate result dropped",
                metadata: ["task.id": "\(id.map(String.init(describing:)) ?? "?")"]
            )
        case .stale:
            break
        }
        self.finishIfDone()
    }

    /// Tells the caller a task is retried, and starts the retry (now, or after its backoff).
    private func retry(
        _ task: ScanTask,
        placement: RetryPolicy.Placement,
        failedAttempt attempt: UInt32,
        system: String,
        outcome: ScanOutcome?,
        in job: Job
    ) {
        let reason =
            switch outcome {
            case .failed(let text, _): text
            case .timedOut: "timed out"
            case .cancelled: "cancelled"
            case .completed, .none: ""
            }
        let delay = self.configuration.retry.backoff.delay(before: task.attempt)
        job.pending.append(
            .retrying(
                task,
                failedAttempt: attempt,
                system: system,
                reason: reason,
                placement: placement,
                delay: delay
            )
        )
        if delay <= .zero {
            self.startRetry(task, placement: placement)
            return
        }
        if let old = self.delayedRetries[task.id] { self.reactor.cancel(old) }
        self.delayedRetries[task.id] = self.reactor.schedule(after: delay) { [weak self] in
            self?.assumeIsolated { coordinator in
                coordinator.delayedRetries[task.id] = nil
                guard let job = coordinator.job, job.ledger.isCurrent(task.id, attempt: task.attempt) else {
                    return
                }
                coordinator.startRetry(task, placement: placement)
                coordinator.connection?.flush()
            }
        }
    }

    func startRetry(_ task: ScanTask, placement: RetryPolicy.Placement) {
        if placement == .local {
            self.localSink.yield(task)
        } else {
            self.send(.submit(task.id, attempt: task.attempt, task.envelope, input: task.input))
        }
    }

    func localFinished(_ result: ScanResult) {
        guard let job = self.job else { return }
        self.apply(
            job.ledger.record(
                result.id,
                attempt: result.attempt,
                outcome: result.outcome,
                system: result.system,
                remoteAllowed: !job.brokerLost
            ),
            id: result.id,
            attempt: result.attempt,
            system: result.system,
            outcome: result.outcome
        )
        self.flushEvents()
    }

    func flushEvents() {
        guard let job = self.job else { return }
        // Nothing to deliver (a chain's turn: its result went straight to the chain). No ACCEPTED
        // timer waits then either: one is armed only while ACCEPTED counts do, and goes with its job.
        guard job.hasEvents || job.accepted > 0 else { return }
        if !job.hasEvents {
            // Only ACCEPTED counts: they wait a little for a result to ride along with, so that a
            // submit-and-wait caller is woken once per task instead of twice.
            if self.acceptedFlush == nil {
                self.acceptedFlush = self.reactor.schedule(after: Self.acceptedDelay) { [weak self] in
                    self?.assumeIsolated { coordinator in
                        coordinator.acceptedFlush = nil
                        coordinator.flushAccepted()
                    }
                }
            }
            return
        }
        if let timer = self.acceptedFlush {
            self.reactor.cancel(timer)
            self.acceptedFlush = nil
        }
        self.flushAccepted()
    }

    /// The most events a job's next batch has room for in advance (see ``flushAccepted()``).
    static let keptEvents = 4096

    /// How long ACCEPTED counts alone may wait for other events before they are delivered.
    static let acceptedDelay = Duration.milliseconds(5)

    func flushAccepted() {
        guard let job = self.job else { return }
        if job.accepted > 0 {
            job.pending.insert(.accepted(count: job.accepted), at: 0)
            job.accepted = 0
        }
        guard job.hasEvents else { return }
        let events = job.pending
        let finals = job.finals
        // The next batch is likely as large: room for it now, not regrown (and its events moved)
        // several times as it fills. Room for the largest of the last batches (the room this one
        // had), not this one's count: batches vary, and a larger one than the last regrew the
        // array (~170 instructions a task of `skynet submit`). Capped, so that a job's one huge
        // batch (a cache answering every task) does not keep its room.
        job.pending = []
        job.pending.reserveCapacity(Swift.min(Swift.max(events.count, events.capacity), Self.keptEvents))
        if job.finalsApart {
            job.finals = []
            job.finals.reserveCapacity(Swift.min(Swift.max(finals.count, finals.capacity), Self.keptEvents))
        }
        self.deliver(consume events, finals: consume finals, to: job)
        self.finishIfDone()
    }

    func finishIfDone() {
        guard let current = self.job, current.ledger.outstanding == 0 else { return }
        // A chain's task has its final result: the chain goes on with the next task, or the job ends.
        if case .chain(let chain) = current.delivery, case .some = current.final {
            self.advance(chain, in: current)
            guard current.ledger.outstanding == 0 else { return }
        }
        guard !current.open else { return }
        var summary = current.ledger.summary
        summary.wall = ContinuousClock.now - current.start
        // Its last figures: a ``submit(_:)`` job's always, a ``run(_:)``'s only when it outlived a
        // heartbeat (one task at a time must not pay a message more per round trip).
        if current.reported || current.streams { self.report(current, summary: summary.merging(self.cacheSummary)) }
        self.lastSummary = consume summary
        var events = current.pending
        let finals = current.finals
        current.pending = []
        current.finals = []
        if current.accepted > 0, current.streams {
            events.insert(.accepted(count: current.accepted), at: 0)
        }
        if !events.isEmpty || !finals.isEmpty { self.deliver(consume events, finals: consume finals, to: current) }
        self.job = nil
        self.spareEntries = current.ledger.takeEntryStorage()
        // A ``run(_:)`` job's list is the coordinator's own (a stream's is its caller's).
        if !current.streams { self.spareTasks = current.ledger.takeTaskStorage() }
        Self.end(current, throwing: nil)
    }

    /// Hands a batch of events to the job's caller (a ``run(_:)`` job keeps only its final result).
    /// `events` is consumed: the stream gets the only reference. Borrowed, the caller's reference
    /// lived until this returned, and a caller on another thread that took the batch at once (and
    /// moves results out of it) found it shared and copied it whole, every event retained (~300
    /// instructions a task of `skynet submit`, depending on the race).
    /// `finals` are a ``Delivery/apart`` job's (empty for any other).
    func deliver(_ events: consuming [CoordinatorEvent], finals: consuming [FinalResult?], to job: Job) {
        switch job.delivery {
        case .stream(let sink): sink.continuation.yield(consume events)
        case .apart(let sink): sink.continuation.yield(EventBatch(events: events, finals: finals))
        case .single, .chain:
            break  // its one final result is kept by `Job.deliver`; its other events are not reported
        }
    }

    /// Ends a job that is no longer `self.job`: its stream finishes, its ``run(_:)`` returns, or its
    /// chain (``runChain(_:next:)``, whose last final result has gone to `next`).
    static func end(_ job: Job, throwing error: (any Error)?) {
        switch job.delivery {
        case .chain(let chain):
            chain.finish(throwing: error)
        case .stream(let sink):
            if let error { sink.continuation.finish(throwing: error) } else { sink.continuation.finish() }
        case .apart(let sink):
            if let error { sink.continuation.finish(throwing: error) } else { sink.continuation.finish() }
        case .single(let continuation):
            if let error {
                continuation.resume(throwing: error)
            } else if let final = job.final.take() {  // moved out, not copied: the job is done with it
                continuation.resume(returning: final)
            } else {
                continuation.resume(throwing: CoordinatorError.noFinalResult)
            }
        }
    }
}
