import Logging
import ZeroMQ

// What coordinators send on the frontend: SUBMIT (alone or in a BATCH), CANCEL, HEARTBEAT, STATUS,
// the detached-job commands (Broker+DetachedJobs.swift) and DISCONNECT; and where a sender's
// routing id is read and bad input is counted.
extension Broker {
    func drainFrontend() {
        guard case .running(let frontend, _, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            try frontend.receiveBatch { message in
                guard let peer = self.routedPeer(message, side: "frontend") else { return }
                do throws(ProtocolError) {
                    let batch = try WireMessage.visit(message, from: 1) { decoded in
                        switch decoded {
                        case .success(let decoded): self.handleCoordinator(peer, decoded)
                        case .failure(let error): self.rejectInput(error, from: peer, side: "frontend")
                        }
                        return true
                    }
                    // A BATCH of SUBMITs may have filled every free slot: those TASKs leave now, not
                    // after the coordinator's next thousand SUBMITs have been handled too.
                    if batch { self.flushGathered(workersOnly: true) }
                } catch {
                    self.rejectInput(error, from: peer, side: "frontend")
                    if error.code == .badVersion {
                        self.sendToCoordinator(peer, .disconnect(.version, text: error.description))
                    }
                }
            }
        } catch {
            self.logger.error("frontend receive failed", metadata: ["error": "\(error)"])
        }
    }

    func handleCoordinator(_ peer: PeerID, _ decoded: WireMessage) {
        if case .statusRequest = decoded {
            // Answered to anyone allowed on this port, at any limit, without registering the asker:
            // `skynet status` is how an operator looks into "at its limit".
            self.sendToCoordinator(peer, .statusReply(json: self.status().json()))
            return
        }
        let now = ContinuousClock.now
        // Counting only when the registry is that big: the usual message costs one comparison.
        if self.state.coordinators.count >= self.configuration.maxCoordinators, self.state.coordinators[peer] == nil,
            self.state.connectedCoordinators >= self.configuration.maxCoordinators
        {
            if case .disconnect = decoded { return }
            let text =
                "the broker is at its limit of \(self.configuration.maxCoordinators) coordinators (--max-coordinators)"
            self.sendToCoordinator(peer, .disconnect(.limit, text: text))
            return
        }
        if self.state.takeExpiredNotice(peer) {
            // We forgot this coordinator while it was silent: it must send its unfinished tasks again.
            self.logger.info(
                "expired coordinator is back; asking it to resend",
                metadata: ["coordinator.id": "\(peer)"]
            )
            self.sendToCoordinator(
                peer,
                .disconnect(.unknownPeer, text: "expired after silence; send unfinished tasks again")
            )
        }
        switch decoded {
        case .submit(let id, let attempt, let envelope, let input):
            if self.stopping {
                // Not ACCEPTED: the task stays its coordinator's, which sends it again to the next
                // broker or hands it to its retry policy when it hears this one stop.
                self.state.coordinatorSeen(peer, now: now)
                return
            }
            if let frames = self.pipeline.takeResult(id, for: peer) {
                // A resend after a restart of a task whose result is already here: that result again.
                self.state.coordinatorSeen(peer, now: now)
                self.journal?.append(.forget(id))
                self.sendFrames(frames, to: peer, keepingResult: nil)
                return
            }
            // Durable mode journals a task the first time it is accepted (the lookup is for that only).
            let isNew = self.journal != nil && self.state.tasks[id] == nil
            let actions = self.state.submit(
                id,
                attempt: attempt,
                envelope: envelope,
                input: input,
                from: peer,
                now: now
            )
            if isNew, self.state.tasks[id] != nil {
                self.appendPromised(.submit(id, coordinator: peer, attempt: attempt, envelope, input: input))
            }
            self.perform(actions)
        case .heartbeat:
            if self.state.coordinatorSeen(peer, now: now) {
                // A new coordinator: answer at once, so it knows within one round trip that we are here.
                self.sendToCoordinator(peer, self.heartbeatMessage)
            }
        case .submitToJob(let id, let attempt, let envelope, let input, let job):
            self.state.coordinatorSeen(peer, now: now)
            if self.stopping { return }
            self.submitToJob(id, attempt: attempt, envelope, input: input, job: job, from: peer, now: now)
        case .jobQuery(let job, let follow):
            self.state.coordinatorSeen(peer, now: now)
            self.answerJobQuery(job, follow: follow, from: peer)
        case .jobCancel(let job):
            self.state.coordinatorSeen(peer, now: now)
            self.cancelJob(job, from: peer)
        case .jobName(let job, let name):
            self.state.coordinatorSeen(peer, now: now)
            self.nameJob(job, name, from: peer)
        case .cancel(let id):
            self.state.coordinatorSeen(peer, now: now)
            self.perform(self.state.cancel(id, from: peer))
        case .jobFigures(let figures):
            self.state.coordinatorJob(peer, figures, now: now)
        case .statusRequest:
            break  // answered above
        case .disconnect:
            self.coordinatorLost(peer)
            self.frontOutbox.drop(peer)
        case .ready, .accepted, .rejected, .task, .result, .progress, .statusReply, .jobReply, .jobResult, .batch,
            .figures:
            self.rejectInput(
                ProtocolError(.wrongDirection, "coordinator sent \(decoded.commandName)"),
                from: peer,
                side: "frontend"
            )
        }
    }

    /// A coordinator is gone: its tasks are dropped (and forgotten by the journal).
    func coordinatorLost(_ peer: PeerID) {
        self.jobs.followerLost(peer)
        if let journal = self.journal {
            for id in self.state.tasks(of: peer) { journal.append(.forget(id)) }
        }
        self.perform(self.state.coordinatorLost(peer))
        self.lastBulkFlush[peer] = nil
    }

    /// The sender of a message on a ROUTER (its routing-id frame), or nil (counted and logged) when
    /// the message has no frame after it or too many frames. Recent senders are kept, so a message
    /// from one of them costs a comparison instead of a new copy of its id.
    func routedPeer(_ message: borrowing Multipart, side: String) -> PeerID? {
        guard message.count >= 2, !message.overflowed else {
            self.rejectInput(ProtocolError(.badFrameCount, "\(message.count) frames"), from: nil, side: side)
            return nil
        }
        let peer = message.withBytes(of: 0) { raw in
            for peer in self.recentPeers
            where peer.bytes.count == raw.count && peer.bytes.withUnsafeBytes({ $0.elementsEqual(raw) }) {
                return peer
            }
            let peer = PeerID(Array(raw))
            if self.recentPeers.count < Self.recentPeerCount {
                self.recentPeers.append(peer)
            } else {
                self.recentPeers[self.nextRecentPeer] = peer
                self.nextRecentPeer = (self.nextRecentPeer + 1) % Self.recentPeerCount
            }
            return peer
        }
        return self.admit(message, from: peer, front: side == "frontend") ? peer : nil
    }

    /// Splits a ROUTER message into its sender and its decoded command. Bad input is counted and
    /// logged here; nil when there is not even a sender.
    func decodeRouted(
        _ message: borrowing Multipart,
        side: String
    ) -> (PeerID, Result<WireMessage, ProtocolError>)? {
        guard let peer = self.routedPeer(message, side: side) else { return nil }
        do throws(ProtocolError) {
            return (peer, .success(try WireMessage.decode(message, from: 1)))
        } catch {
            self.rejectInput(error, from: peer, side: side)
            return (peer, .failure(error))
        }
    }

    func rejectInput(_ error: ProtocolError, from peer: PeerID?, side: String) {
        self.badInput[error.code.description, default: 0] += 1
        self.badLog.log(
            self.logger,
            level: .warning,
            "bad input dropped",
            metadata: ["side": "\(side)", "peer": "\(peer.map(String.init(describing:)) ?? "?")", "reason": "\(error)"]
        )
    }
}
