import Logging

// What workers send (READY, HEARTBEAT, FIGURES, RESULT, PROGRESS, DISCONNECT), and a worker lost.
extension BrokerMachine {
    /// A message from a worker on the backend.
    /// - Parameters:
    ///   - frames: the message's frames after the routing id, read only when a durable broker
    ///     journals a RESULT.
    /// - Returns: the coordinator to forward the message to as it came (a live RESULT without a
    ///   journal, or a PROGRESS), or nil.
    package mutating func worker(
        _ peer: PeerID,
        _ message: WireMessage,
        frames: @autoclosure () -> [[UInt8]],
        now: ContinuousClock.Instant
    ) -> PeerID? {
        if let standby = self.standby {
            var disconnecting = false
            if case .disconnect = message { disconnecting = true }
            self.redirect(peer, disconnecting: disconnecting, standby: standby, worker: true)
            return nil
        }
        switch message {
        case .ready(let capacity, let info):
            let known = self.state.workers[peer] != nil
            let limit = self.rules.maxWorkers
            if !known, self.state.workers.count >= limit {
                let text = "the broker is at its limit of \(limit) workers (--max-workers)"
                self.emit(.toWorker(peer, .disconnect(.limit, text: text)))
                self.limitWarning("worker refused: at the limit", peer: peer)
                return nil
            }
            self.apply(self.state.workerReady(peer, capacity: Int(capacity), info: info, now: now), now: now)
            // The answer to READY, at once: the worker knows it is registered, and the broker's
            // heartbeat interval, within one round trip.
            self.emit(.toWorker(peer, self.heartbeat))
            self.logger.info(
                known ? "worker re-registered" : "worker registered",
                metadata: [
                    "worker.id": "\(peer)", "worker.name": "\(info.name)", "slots": "\(capacity)",
                    "kinds": "\(info.kinds.joined(separator: ","))",
                ]
            )
        case .heartbeat:
            if !self.state.workerSeen(peer, now: now) { self.unknownWorker(peer) }
        case .disconnect(.draining, _):
            _ = self.state.workerSeen(peer, now: now)
            self.apply(self.state.workerDraining(peer), now: now)
            self.logger.info("worker draining", metadata: ["worker.id": "\(peer)"])
        case .disconnect(let reason, let text):
            if self.state.workers[peer] != nil {
                self.logger.info("worker left", metadata: ["worker.id": "\(peer)", "reason": "\(reason): \(text)"])
                self.apply(self.state.workerLost(peer, reason: "disconnected: \(reason)"), now: now)
                self.forgetOutbox(ofWorker: peer)
            }
        case .result(let id, let attempt, let status, let meta, let body):
            // A detached job's task is looked up before the state lets it go (the job needs it after).
            let entry = self.jobs.isEmpty ? nil : self.state.tasks[id]
            guard
                let coordinator = self.result(
                    from: peer,
                    id,
                    attempt: attempt,
                    status: status,
                    runMicroseconds: meta.durationMicroseconds,
                    now: now
                )
            else { return nil }
            if let job = coordinator.job {
                if let entry { self.jobAttemptEnded(job, entry, status, meta, body: body, now: now) }
                return nil
            }
            guard self.durable else { return coordinator }
            // Durable: on disk before it is forwarded.
            var frames = frames()
            let bytes = frames.reduce(0) { $0 + $1.count }
            if bytes > self.rules.maxRecordBytes {
                // The journal cannot hold it (etcd's request limit): what is kept and sent is a failure
                // that says so, and the coordinator's retry policy decides.
                let text =
                    "result of \(bytes) bytes is over the journal's limit of \(self.rules.maxRecordBytes) (etcd's request limit)"
                frames = WireMessage.result(id, attempt: attempt, .failed, meta, body: Array(text.utf8)).encode()
            }
            self.journal(.result(id, coordinator: coordinator, frames: frames))
            self.pipeline.deferUntilCommitted(frames, to: coordinator, result: id)
        case .figures(let figures):
            if !self.state.workerFigures(peer, figures, now: now) { self.unknownWorker(peer) }
        case .progress(let id, let attempt, _):
            _ = self.state.workerSeen(peer, now: now)
            if let entry = self.state.tasks[id], entry.isLeased(to: peer), entry.attempt == attempt,
                entry.coordinator.job == nil
            {
                return entry.coordinator
            }
        case .submit, .accepted, .acceptedList, .rejected, .task, .cancel, .statusRequest, .statusReply, .submitToJob,
            .jobQuery,
            .jobCancel, .jobName, .jobReply, .jobResult, .batch, .jobFigures:
            self.badInput(
                ProtocolError(.wrongDirection, "worker sent \(message.commandName)"),
                from: peer,
                side: "backend"
            )
        }
        return nil
    }

    /// A worker's RESULT for `id` (read in place by the actor without a journal, or decoded): its
    /// lease ends and its credit returns (more is dispatched).
    /// - Returns: the coordinator (or detached job) it goes to, when it is the live attempt's.
    package mutating func result(
        from peer: PeerID,
        _ id: TaskID,
        attempt: UInt32,
        status: ResultStatus,
        runMicroseconds: UInt32,
        now: ContinuousClock.Instant
    ) -> PeerID? {
        if !self.deadlines.isEmpty { self.deadlines.answered(id, by: peer, attempt: attempt) }
        var forwardTo: PeerID?
        self.withActions(now: now) { machine, actions in
            let disposition = machine.state.workerResult(
                peer,
                taskID: id,
                attempt: attempt,
                status: status,
                runMicroseconds: runMicroseconds,
                now: now,
                into: &actions
            )
            switch disposition {
            case .forward(let coordinator):
                machine.resultReleasesHold(id)
                forwardTo = coordinator
            case .stale:
                machine.logger.debug("stale result dropped", metadata: ["task.id": "\(id)", "attempt": "\(attempt)"])
            case .unknownWorker:
                machine.unknownWorker(peer)
            }
        }
        return forwardTo
    }

    /// A message from a worker that could not be read: the worker is dropped (its leases requeued)
    /// and told why.
    package mutating func workerBrokeProtocol(_ peer: PeerID, _ error: ProtocolError, now: ContinuousClock.Instant) {
        self.badInput(error, from: peer, side: "backend")
        guard self.state.workers[peer] != nil else { return }
        let reason: DisconnectReason = error.code == .badVersion ? .version : .protocolError
        self.forgetOutbox(ofWorker: peer, goodbye: .disconnect(reason, text: error.description))
        self.apply(self.state.workerLost(peer, reason: "protocol error"), now: now)
    }

    /// The rule for a worker the machine drops, whatever the cause: what the broker gathered or
    /// parked for it goes (and the form it was known to read), and then `goodbye`, if any, is sent,
    /// the last message it gets. A stopped or stalled worker's parked TASKs (requeued elsewhere)
    /// would otherwise stay, retried every few ms, and go out if it ever woke.
    mutating func forgetOutbox(ofWorker peer: PeerID, goodbye: WireMessage? = nil) {
        self.emit(.dropOutbox(peer, front: false))
        if let goodbye { self.emit(.toWorker(peer, goodbye)) }
    }

    /// A worker the broker does not know spoke: it must register again.
    private mutating func unknownWorker(_ peer: PeerID) {
        self.emit(.toWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY")))
    }

    /// A worker is gone for `reason` (unreachable, its key revoked): its leases are requeued.
    package mutating func workerLost(_ peer: PeerID, reason: String, now: ContinuousClock.Instant) {
        guard self.state.workers[peer] != nil else { return }
        self.logger.info("worker lost", metadata: ["worker.id": "\(peer)", "reason": "\(reason)"])
        self.apply(self.state.workerLost(peer, reason: reason), now: now)
        self.forgetOutbox(ofWorker: peer)
    }
}
