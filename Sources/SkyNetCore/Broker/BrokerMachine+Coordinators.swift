import Logging

// What coordinators send (SUBMIT, CANCEL, HEARTBEAT, STATUS, FIGURES, the detached-job commands,
// DISCONNECT), and a coordinator lost.
extension BrokerMachine {
    /// A message from a coordinator on the frontend.
    /// - Parameters:
    ///   - key: the sender's CURVE key (Z85), nil without CURVE; read only for detached jobs.
    package mutating func coordinator(
        _ peer: PeerID,
        _ message: WireMessage,
        key: @autoclosure () -> String?,
        now: ContinuousClock.Instant
    ) {
        if case .statusRequest = message {
            // Answered to anyone allowed on this port, at any limit, without registering the asker:
            // `skynet status` is how an operator looks into "at its limit".
            self.emit(.statusReply(peer))
            return
        }
        var disconnecting = false
        if case .disconnect = message { disconnecting = true }
        guard self.admit(peer, disconnecting: disconnecting) else { return }
        switch message {
        case .submit(let id, let attempt, let envelope, let input):
            self.submit(id, attempt: attempt, envelope, input: TaskBytes(input), from: peer, now: now)
        case .heartbeat:
            if self.state.coordinatorSeen(peer, now: now) {
                // A new coordinator: answer at once, so it knows within one round trip that we are
                // here, and at what interval we beat.
                self.emit(.toCoordinator(peer, self.heartbeat))
            }
        case .submitToJob(let id, let attempt, let envelope, let input, let job):
            self.state.coordinatorSeen(peer, now: now)
            guard self.phase == .serving else { return }
            self.submitToJob(id, attempt: attempt, envelope, input: input, job: job, from: peer, key: key(), now: now)
        case .jobQuery(let job, let follow):
            self.state.coordinatorSeen(peer, now: now)
            self.answerJobQuery(job, follow: follow, from: peer, key: key())
        case .jobCancel(let job):
            self.state.coordinatorSeen(peer, now: now)
            self.cancelJob(job, from: peer, key: key(), now: now)
        case .jobName(let job, let name):
            self.state.coordinatorSeen(peer, now: now)
            self.nameJob(job, name, key: key())
        case .cancel(let id):
            self.state.coordinatorSeen(peer, now: now)
            self.apply(self.state.cancel(id, from: peer), now: now)
        case .jobFigures(let figures):
            self.state.coordinatorJob(peer, figures, now: now)
        case .statusRequest:
            break  // answered above
        case .disconnect:
            self.coordinatorLost(peer, now: now)
        case .ready, .accepted, .acceptedList, .rejected, .task, .result, .progress, .statusReply, .jobReply,
            .jobResult, .batch,
            .figures:
            self.badInput(
                ProtocolError(.wrongDirection, "coordinator sent \(message.commandName)"),
                from: peer,
                side: "frontend"
            )
        }
    }

    /// A coordinator's SUBMIT read in place (``WireMessage/taskParts(_:_:)``), its input copied from the
    /// frame into a ``TaskBytes`` (no array made for a small one): the same as
    /// ``coordinator(_:_:key:now:)`` with `.submit`.
    package mutating func coordinatorSubmit(
        _ peer: PeerID,
        _ id: TaskID,
        attempt: UInt32,
        _ envelope: TaskEnvelope,
        input: TaskBytes,
        readsAcceptedLists: Bool = false,
        now: ContinuousClock.Instant
    ) {
        guard self.admit(peer, disconnecting: false) else { return }
        self.submit(
            id,
            attempt: attempt,
            envelope,
            input: input,
            from: peer,
            readsAcceptedLists: readsAcceptedLists,
            now: now
        )
    }

    /// Whether a message (but a STATUS request) from coordinator `peer` is handled: not on a standby
    /// (redirected), not beyond the limit of coordinators (refused). A coordinator forgotten while it
    /// was silent is told to send its unfinished tasks again, and its message is handled.
    private mutating func admit(_ peer: PeerID, disconnecting: Bool) -> Bool {
        if let standby = self.standby {
            self.redirect(peer, disconnecting: disconnecting, standby: standby, worker: false)
            return false
        }
        let limit = self.rules.maxCoordinators
        // Counting only when the registry is that big: the usual message costs one comparison.
        if self.state.coordinators.count >= limit, self.state.coordinators[peer] == nil,
            self.state.connectedCoordinators >= limit
        {
            if disconnecting { return false }
            let text = "the broker is at its limit of \(limit) coordinators (--max-coordinators)"
            self.emit(.toCoordinator(peer, .disconnect(.limit, text: text)))
            self.limitWarning("coordinator refused: at the limit", peer: peer)
            return false
        }
        if self.state.takeExpiredNotice(peer) {
            // We dropped this coordinator without its word (silent, unreachable): it must send its
            // unfinished tasks again.
            self.logger.info(
                "dropped coordinator is back; asking it to resend",
                metadata: ["coordinator.id": "\(peer)"]
            )
            self.emit(
                .toCoordinator(
                    peer,
                    .disconnect(.unknownPeer, text: "dropped while silent or unreachable; send unfinished tasks again")
                )
            )
        }
        return true
    }

    /// A message from a coordinator that could not be read. A wrong version is told so.
    package mutating func coordinatorBrokeProtocol(_ peer: PeerID, _ error: ProtocolError) {
        self.badInput(error, from: peer, side: "frontend")
        if error.code == .badVersion { self.emit(.toCoordinator(peer, .disconnect(.version, text: error.description))) }
    }

    private mutating func submit(
        _ id: TaskID,
        attempt: UInt32,
        _ envelope: TaskEnvelope,
        input: TaskBytes,
        from peer: PeerID,
        readsAcceptedLists: Bool = false,
        now: ContinuousClock.Instant
    ) {
        guard self.phase == .serving else {
            // Not ACCEPTED: the task stays its coordinator's, which sends it again to the next broker
            // or hands it to its retry policy when it hears this one stop.
            self.state.coordinatorSeen(peer, now: now)
            return
        }
        if self.durable, let frames = self.pipeline.takeResult(id, for: peer) {
            // A resend after a restart of a task whose result is already here: that result again.
            self.state.coordinatorSeen(peer, now: now)
            self.journal(.forget(id))
            self.emit(.frames(peer, frames, keep: nil))
            return
        }
        // Durable mode journals a task the first time it is accepted (the lookup is for that only).
        let isNew = self.durable && self.state.tasks[id] == nil
        if isNew, input.count + envelope.encodedSize > self.rules.maxRecordBytes {
            self.state.coordinatorSeen(peer, now: now)
            let text =
                "task of \(input.count + envelope.encodedSize) bytes is over the journal's limit of \(self.rules.maxRecordBytes) (etcd's request limit)"
            self.emit(.toCoordinator(peer, .rejected(id, .invalid, text: text)))
            return
        }
        self.withActions(now: now) { machine, actions in
            machine.state.submit(
                id,
                attempt: attempt,
                envelope: envelope,
                input: input,
                from: peer,
                readsAcceptedLists: readsAcceptedLists,
                now: now,
                into: &actions
            )
            if isNew, machine.state.tasks[id] != nil {
                machine.journal(.submit(id, coordinator: peer, attempt: attempt, envelope, input: input.array))
            }
        }
    }

    /// A coordinator is gone (it said DISCONNECT, a send to it failed, its key was revoked): its tasks
    /// are dropped (and forgotten by the journal), its running ones cancelled on their workers.
    package mutating func coordinatorLost(_ peer: PeerID, now: ContinuousClock.Instant) {
        guard peer.job == nil else { return }
        self.jobs.followerLost(peer)
        if self.durable {
            for id in self.state.tasks(of: peer) { self.journal(.forget(id)) }
        }
        self.apply(self.state.coordinatorLost(peer), now: now)
        self.forgetBulk(peer)
        self.emit(.dropOutbox(peer, front: true))
    }

    /// A message for a coordinator could not go (it is gone). A coordinator known only from the
    /// journal is not lost for that: it has until its grace ends to come back. One lost is
    /// remembered as dropped without its word: a process paused (Ctrl-Z) past libzmq's heartbeats
    /// comes back on a new connection, and must hear that its tasks are gone.
    package mutating func coordinatorUnreachable(_ peer: PeerID, now: ContinuousClock.Instant) {
        guard peer.job == nil, self.state.coordinators[peer]?.awaitingReconnect == nil else { return }
        self.logger.info("coordinator unreachable", metadata: ["coordinator.id": "\(peer)"])
        let known = self.state.coordinators[peer] != nil
        self.coordinatorLost(peer, now: now)
        if known { self.state.rememberDropped(peer) }
    }

    /// A RESULT (``Effect/frames(_:_:keep:)`` with `keep`) could not be delivered: it is kept for a
    /// while in case its coordinator asks again, and the coordinator is unreachable.
    package mutating func undeliverable(
        _ peer: PeerID,
        frames: [[UInt8]],
        result id: TaskID,
        now: ContinuousClock.Instant
    ) {
        self.pipeline.keep(id, frames: frames, for: peer, until: now + self.rules.recoveryGrace)
        self.coordinatorUnreachable(peer, now: now)
    }
}
