import Logging
import ZeroMQ

// Carrying out the state machines' actions, and sending: every message goes through a side's
// ``Outbox``, which gathers a reactor turn's messages per peer into one BATCH, parks what cannot go
// now (in order, retried every 2 ms), and reports peers that are gone.
extension Broker {
    func perform(_ actions: [BrokerState.Action]) {
        for action in actions {
            switch action {
            case .dispatch(let worker, let id):
                self.sendTask(id, to: worker)
            case .accepted(let coordinator, let id, let attempt, let requeued):
                let message = WireMessage.accepted(id, attempt: attempt, requeued: requeued)
                if self.journal != nil {
                    // Durable: ACCEPTED only once the SUBMIT (or the new attempt) is on disk.
                    if requeued { self.appendPromised(.attempt(id, attempt)) }
                    self.pipeline.deferUntilCommitted(message.encode(), to: coordinator)
                } else if requeued {
                    self.sendToCoordinator(coordinator, message)
                } else {
                    self.holdAccepted(coordinator, id, attempt: attempt)
                }
            case .rejected(let coordinator, let id, let reason, let text):
                self.sendToCoordinator(coordinator, .rejected(id, reason, text: text))
            case .resultForCoordinator(let coordinator, let id, let attempt, let status, let reason):
                if let job = coordinator.job {
                    let meta = ResultMeta(system: "broker", durationMicroseconds: 0, slot: 0, busy: 0)
                    self.finishJobTask(job, id, attempt: attempt, status, meta, body: Array(reason.utf8))
                    continue
                }
                self.journal?.append(.forget(id))
                let meta = ResultMeta(system: "broker", durationMicroseconds: 0, slot: 0, busy: 0)
                self.sendToCoordinator(
                    coordinator,
                    .result(id, attempt: attempt, status, meta, body: Array(reason.utf8))
                )
            case .cancelOnWorker(let worker, let id):
                self.sendToWorker(worker, .cancel(id))
            case .disconnect(let peer, let reason, let text):
                self.sendToWorker(peer, .disconnect(reason, text: text))
            case .coordinatorExpired(let peer, let tasks):
                self.logger.info(
                    "coordinator expired after silence",
                    metadata: ["coordinator.id": "\(peer)", "tasks": "\(tasks.count)"]
                )
                for id in tasks { self.journal?.append(.forget(id)) }
                self.jobs.followerLost(peer)
                self.lastBulkFlush[peer] = nil
            }
        }
    }

    /// Holds a first ACCEPTED for up to ``acceptedHold``: a task whose RESULT goes out before then
    /// needs none (a RESULT tells its coordinator that the broker had the task), which saves a
    /// short task's coordinator a message and a wake-up. Durable mode does not hold them (an ACCEPTED
    /// there waits for the journal anyway).
    func holdAccepted(_ coordinator: PeerID, _ id: TaskID, attempt: UInt32) {
        self.heldAccepted.append((coordinator, id, attempt))
        guard self.acceptedTimer == nil else { return }
        self.acceptedTimer = self.reactor.schedule(after: Self.acceptedHold, self.acceptedTimerFired)
    }

    /// Sends the held ACCEPTEDs of tasks the broker still has (the others got their RESULT).
    func sendHeldAccepted() {
        let held = self.heldAccepted
        self.heldAccepted.removeAll(keepingCapacity: true)
        for (coordinator, id, attempt) in held where self.state.tasks.coordinator(of: id) == coordinator {
            self.sendToCoordinator(coordinator, .accepted(id, attempt: attempt, requeued: false))
        }
    }

    /// Sends encoded frames to a coordinator. A RESULT that cannot be delivered (its coordinator has
    /// not reconnected since a restart, or is gone) is kept for a while in case it asks again.
    func sendFrames(_ frames: [[UInt8]], to coordinator: PeerID, keepingResult id: TaskID?) {
        // A RESULT kept if it cannot be delivered needs to know now; anything else is gathered.
        let put = self.putForCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            id == nil
                ? try outbox.enqueue(frames, to: coordinator, on: frontend)
                : try outbox.sendNow(frames, to: coordinator, on: frontend)
        }
        guard let outcome = put else { return }
        if case .unreachable = outcome {
            if let id {
                self.pipeline.keep(id, frames: frames, for: coordinator, until: .now + self.configuration.recoveryGrace)
            }
            // A coordinator known only from the journal has until its grace ends to come back.
            if self.state.coordinators[coordinator]?.awaitingReconnect != nil { return }
        }
        self.handle(outcome, peer: coordinator, front: true)
    }

    func sendToWorker(_ worker: PeerID, _ message: WireMessage) {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        let outcome: Outbox.Outcome
        do throws(ZMQError) {
            outcome = try self.backOutbox.enqueue(message, to: worker, on: backend)
        } catch {
            self.logger.error("send to worker failed", metadata: ["worker.id": "\(worker)", "error": "\(error)"])
            return
        }
        self.handle(outcome, peer: worker, front: false)
    }

    func sendToCoordinator(_ coordinator: PeerID, _ message: WireMessage) {
        self.toCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            try outbox.enqueue(message, to: coordinator, on: frontend)
        }
    }

    /// Forwards a worker's RESULT or PROGRESS (frames after the routing id): gathered with the other
    /// messages for its coordinator when small, or sent on without copying its payload.
    func forwardToCoordinator(_ coordinator: PeerID, _ message: inout Multipart) {
        self.toCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            try outbox.enqueue(&message, from: 1, to: coordinator, on: frontend)
        }
    }

    /// Gathers a message in packed form (a RESULT from a worker's BATCH) for its coordinator.
    func forwardPacked(_ packed: UnsafeRawBufferPointer, to coordinator: PeerID) {
        self.toCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            try outbox.enqueue(packed: packed, to: coordinator, on: frontend)
        }
    }

    /// Puts something in a (connected) coordinator's outbox and handles the outcome.
    func toCoordinator(
        _ coordinator: PeerID,
        _ put: (inout Outbox, Socket) throws(ZMQError) -> Outbox.Outcome
    ) {
        guard let outcome = self.putForCoordinator(coordinator, put) else { return }
        self.handle(outcome, peer: coordinator, front: true)
    }

    /// Puts something in a coordinator's outbox. Returns nil when it is not sent: the broker is not
    /// running, the coordinator is a detached job (never sent to), or the send failed (logged).
    func putForCoordinator(
        _ coordinator: PeerID,
        _ put: (inout Outbox, Socket) throws(ZMQError) -> Outbox.Outcome
    ) -> Outbox.Outcome? {
        guard case .running(let frontend, _, _) = self.lifecycle, coordinator.job == nil else { return nil }
        do throws(ZMQError) {
            return try put(&self.frontOutbox, frontend)
        } catch {
            self.logger.error(
                "send to coordinator failed",
                metadata: ["coordinator.id": "\(coordinator)", "error": "\(error)"]
            )
            return nil
        }
    }

    /// Sends a dispatched task's TASK, written straight into the worker's BATCH from the task table
    /// (no copy of the entry, no frames built); a large input goes as a message of its own.
    func sendTask(_ id: TaskID, to worker: PeerID) {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        let result = self.state.tasks.withEntry(id) {
            entry -> (Result<Outbox.Outcome, ZMQError>, attempt: UInt32, deadline: ContinuousClock.Instant?) in
            let deadline =
                entry.envelope.timeoutMilliseconds > 0
                ? ContinuousClock.now + .milliseconds(entry.envelope.timeoutMilliseconds)
                    + self.configuration.heartbeat.expiry : nil
            let outcome = Result { () throws(ZMQError) -> Outbox.Outcome in
                if entry.input.count + 128 > Outbox.batchableBytes {
                    let frames = WireMessage.task(id, attempt: entry.attempt, entry.envelope, input: entry.input)
                        .encode()
                    return try self.backOutbox.enqueue(frames, to: worker, on: backend)
                }
                return try self.backOutbox.enqueue(to: worker, on: backend) { writer in
                    writer.appendTask(id, attempt: entry.attempt, entry.envelope, input: entry.input)
                }
            }
            return (outcome, entry.attempt, deadline)
        }
        guard let (outcome, attempt, deadline) = result else { return }
        if let deadline { self.leaseDeadlines.leased(id, to: worker, attempt: attempt, deadline: deadline) }
        switch outcome {
        case .success(let outcome): self.handle(outcome, peer: worker, front: false)
        case .failure(let error):
            self.logger.error("send to worker failed", metadata: ["worker.id": "\(worker)", "error": "\(error)"])
        }
    }

    func handle(_ outcome: Outbox.Outcome, peer: PeerID, front: Bool) {
        switch outcome {
        case .sent, .gathered: break
        case .parked: self.armFlush()
        case .unreachable: self.peerUnreachable(peer, front: front)
        }
    }

    func peerUnreachable(_ peer: PeerID, front: Bool) {
        if front {
            guard peer.job == nil else { return }
            self.logger.info("coordinator unreachable", metadata: ["coordinator.id": "\(peer)"])
            self.frontOutbox.drop(peer)
            self.coordinatorLost(peer)
        } else {
            self.logger.info("worker unreachable", metadata: ["worker.id": "\(peer)"])
            self.backOutbox.drop(peer)
            self.perform(self.state.workerLost(peer, reason: "unreachable"))
        }
    }

    func armFlush() {
        guard self.flushTimer == nil else { return }
        self.flushTimer = self.reactor.schedule(after: .milliseconds(1), every: .milliseconds(2)) { [weak self] in
            self?.assumeIsolated { $0.flushOutboxes() }
        }
    }

    /// Sends what this turn of the reactor gathered, one message or one BATCH per peer (the reactor
    /// calls it before it polls); a bulk coordinator's may wait (``holdForBulk(_:now:)``) unless `all`.
    /// `workersOnly` sends just what is gathered for workers (mid-turn, after a BATCH of SUBMITs).
    /// Losing a peer here may gather more (a requeued task's ACCEPTED), so it goes round again then.
    func flushGathered(all: Bool = false, workersOnly: Bool = false) {
        guard case .running(let frontend, let backend, _) = self.lifecycle else { return }
        if workersOnly {
            guard self.backOutbox.hasPending else { return }
            do throws(ZMQError) {
                let back = try self.backOutbox.flushPending(on: backend)
                if back.parked { self.armFlush() }
                for peer in back.unreachable { self.peerUnreachable(peer, front: false) }
            } catch {
                self.logger.error("send failed", metadata: ["error": "\(error)"])
            }
            return
        }
        let now = ContinuousClock.now
        do throws(ZMQError) {
            for _ in 0..<4 {
                // Workers first: their TASKs are the credit cycle's critical path.
                let back = try self.backOutbox.flushPending(on: backend)
                let front = try self.frontOutbox.flushPending(on: frontend) { !all && self.holdForBulk($0, now: now) }
                if front.parked || back.parked { self.armFlush() }
                if front.unreachable.isEmpty && back.unreachable.isEmpty { break }
                for peer in front.unreachable { self.peerUnreachable(peer, front: true) }
                for peer in back.unreachable { self.peerUnreachable(peer, front: false) }
            }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// A coordinator with many tasks here gets what is gathered for it at most once per
    /// ``bulkGathering`` (its results come in bigger batches, and it is woken less often while the
    /// workers go on at full speed); one with few tasks, at once (a lone task's round trip is not
    /// delayed).
    func holdForBulk(_ coordinator: PeerID, now: ContinuousClock.Instant) -> Bool {
        guard let entry = self.state.coordinators[coordinator], entry.taskCount >= Self.bulkTasks else { return false }
        if let last = self.lastBulkFlush[coordinator], now - last < Self.bulkGathering {
            if self.bulkTimer == nil {
                self.bulkTimer = self.reactor.schedule(after: last + Self.bulkGathering - now) { [weak self] in
                    // Only the wake-up is needed: the flush runs before the next poll.
                    self?.assumeIsolated { $0.bulkTimer = nil }
                }
            }
            return true
        }
        self.lastBulkFlush[coordinator] = now
        return false
    }

    func flushOutboxes() {
        guard case .running(let frontend, let backend, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            for peer in try self.frontOutbox.flush(on: frontend) { self.peerUnreachable(peer, front: true) }
            for peer in try self.backOutbox.flush(on: backend) { self.peerUnreachable(peer, front: false) }
        } catch {
            self.logger.error("flush failed", metadata: ["error": "\(error)"])
        }
        if self.frontOutbox.isEmpty && self.backOutbox.isEmpty, let timer = self.flushTimer {
            self.reactor.cancel(timer)
            self.flushTimer = nil
        }
    }
}
