import Logging
import ZeroMQ

// What workers send on the backend: READY, HEARTBEAT, RESULT, PROGRESS, DISCONNECT, alone or in a
// BATCH. Without a journal a worker's RESULTs go on to their coordinators as they came (checked in
// place, never decoded into Swift values); a durable broker journals each first (Broker+Journal.swift).
extension Broker {
    func drainBackend() {
        guard case .running(_, let backend, _) = self.lifecycle else { return }
        do throws(ZMQError) {
            try backend.receiveBatch { message in
                if self.journal == nil, message.count == 3, !message.overflowed, message.size(of: 1) == Header.size,
                    message.withBytes(of: 1, { $0[3] }) == Command.batch.rawValue
                {
                    return self.handleWorkerBatch(message)
                }
                if self.journal == nil, message.count == 4, !message.overflowed, message.size(of: 1) == Header.size,
                    message.withBytes(of: 1, { $0[3] }) == Command.result.rawValue
                {
                    return self.handleWorkerResult(&message)
                }
                guard let (peer, result) = self.decodeRouted(message, side: "backend") else { return }
                switch result {
                case .failure(let error):
                    self.workerBrokeProtocol(peer, error)
                case .success(.batch(let messages)):
                    for frames in messages {
                        let decoded: WireMessage
                        do throws(ProtocolError) {
                            decoded = try WireMessage.decode(frames)
                        } catch {
                            self.rejectInput(error, from: peer, side: "backend")
                            self.workerBrokeProtocol(peer, error)
                            return
                        }
                        guard let forward = self.handleWorker(peer, decoded) else { continue }
                        self.forward(forward, decoded, frames: frames)
                    }
                case .success(let decoded):
                    guard let forward = self.handleWorker(peer, decoded) else { return }
                    if self.journal == nil {
                        self.forwardToCoordinator(forward.coordinator, &message)
                    } else {
                        self.forward(forward, decoded, frames: message.allBytes(from: 1))
                    }
                }
            }
        } catch {
            self.logger.error("backend receive failed", metadata: ["error": "\(error)"])
        }
    }

    func workerBrokeProtocol(_ peer: PeerID, _ error: ProtocolError) {
        guard self.state.workers[peer] != nil else { return }
        let reason: DisconnectReason = error.code == .badVersion ? .version : .protocolError
        self.sendToWorker(peer, .disconnect(reason, text: error.description))
        self.perform(self.state.workerLost(peer, reason: "protocol error"))
    }

    /// A worker's RESULT or PROGRESS that goes on to its coordinator as it came.
    struct Forward {
        let coordinator: PeerID
        /// A RESULT's task: in durable mode it is journaled before it is forwarded.
        let result: TaskID?
    }

    /// Forwards a worker's message (its frames after the routing id) to its coordinator; a durable
    /// broker journals a RESULT first and forwards it once the journal holds it.
    func forward(_ forward: Forward, _ decoded: WireMessage, frames: [[UInt8]]) {
        if let id = forward.result, self.journal != nil {
            self.appendPromised(.result(id, coordinator: forward.coordinator, frames: frames))
            self.pipeline.deferUntilCommitted(frames, to: forward.coordinator, result: id)
        } else {
            self.sendFrames(frames, to: forward.coordinator, keepingResult: nil)
        }
    }

    /// A worker's RESULT for `id`: its lease ends and its credit returns (more is dispatched), and the
    /// disposition says where it goes. `entry` is the task as it was, looked up only when detached jobs
    /// exist (they need it after the state has removed it).
    func resultArrived(
        from peer: PeerID,
        _ id: TaskID,
        attempt: UInt32,
        status: ResultStatus,
        runMicroseconds: UInt32,
        now: ContinuousClock.Instant
    ) -> (BrokerState.ResultDisposition, BrokerState.TaskEntry?) {
        self.leaseDeadlines.answered(id, by: peer, attempt: attempt)
        let entry = self.jobs.isEmpty ? nil : self.state.tasks[id]
        let (disposition, actions) = self.state.workerResult(
            peer,
            taskID: id,
            attempt: attempt,
            status: status,
            runMicroseconds: runMicroseconds,
            now: now
        )
        switch disposition {
        case .forward:
            // A lone task's held ACCEPTED is not needed any more: drop it, and the timer with it (one
            // wake-up less per round trip when tasks go one at a time).
            if self.heldAccepted.last?.id == id {
                self.heldAccepted.removeLast()
                if self.heldAccepted.isEmpty, let timer = self.acceptedTimer {
                    self.reactor.cancel(timer)
                    self.acceptedTimer = nil
                }
            }
        case .stale:
            self.logger.debug("stale result dropped", metadata: ["task.id": "\(id)", "attempt": "\(attempt)"])
        case .unknownWorker:
            self.sendToWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY"))
        }
        self.perform(actions)
        return (disposition, entry)
    }

    /// A worker's RESULT alone without a journal: checked in place, and forwarded as it came.
    func handleWorkerResult(_ message: inout Multipart) {
        guard let peer = self.routedPeer(message, side: "backend") else { return }
        let checked = message.withFrames(from: 1) { frames in
            Result { () throws(ProtocolError) -> ResultView? in try ResultView(frames) }
        }
        switch checked {
        case .success(let result?):
            let (disposition, _) = self.resultArrived(
                from: peer,
                result.taskID,
                attempt: result.attempt,
                status: result.status,
                runMicroseconds: result.durationMicroseconds,
                now: .now
            )
            if case .forward(let coordinator) = disposition { self.forwardToCoordinator(coordinator, &message) }
        case .success(nil):
            break
        case .failure(let error):
            self.rejectInput(error, from: peer, side: "backend")
            self.workerBrokeProtocol(peer, error)
        }
    }

    /// A worker's BATCH without a journal: its RESULTs are checked and forwarded in place, each
    /// appended to its coordinator's gathered messages as it came (no frames built, nothing
    /// re-encoded); anything else inside is decoded as usual. A bad message ends the BATCH and the
    /// worker, as it would alone.
    func handleWorkerBatch(_ message: borrowing Multipart) {
        guard let peer = self.routedPeer(message, side: "backend") else { return }
        let now = ContinuousClock.now
        var failure: ProtocolError?
        do throws(ProtocolError) {
            let header = try message.withBytes(of: 1) { bytes throws(ProtocolError) in try Header.decode(bytes) }
            try message.withBytes(of: 2) { bytes throws(ProtocolError) in
                try Batch.forEach(bytes, count: header.arg) { packed in
                    guard failure == nil else { return }
                    do throws(ProtocolError) {
                        if let result = try ResultView(packed) {
                            let (disposition, _) = self.resultArrived(
                                from: peer,
                                result.taskID,
                                attempt: result.attempt,
                                status: result.status,
                                runMicroseconds: result.durationMicroseconds,
                                now: now
                            )
                            if case .forward(let coordinator) = disposition {
                                self.forwardPacked(packed.raw, to: coordinator)
                            }
                        } else if let forward = self.handleWorker(peer, try WireMessage.decode(packed)) {
                            // A PROGRESS: on to its coordinator as it came.
                            self.forwardPacked(packed.raw, to: forward.coordinator)
                        }
                    } catch {
                        failure = error
                    }
                }
            }
        } catch {
            failure = error
        }
        if let failure {
            self.rejectInput(failure, from: peer, side: "backend")
            self.workerBrokeProtocol(peer, failure)
        }
    }

    /// Handles one message from a worker; returns where it goes on to when it is a RESULT or PROGRESS
    /// for a coordinator.
    func handleWorker(_ peer: PeerID, _ decoded: WireMessage) -> Forward? {
        let now = ContinuousClock.now
        switch decoded {
        case .ready(let capacity, let info):
            let known = self.state.workers[peer] != nil
            if !known, self.state.workers.count >= self.configuration.maxWorkers {
                let text = "the broker is at its limit of \(self.configuration.maxWorkers) workers (--max-workers)"
                self.sendToWorker(peer, .disconnect(.limit, text: text))
                self.securityLog.log(
                    self.logger,
                    level: .warning,
                    "worker refused: at the limit",
                    metadata: ["worker.id": "\(peer)"]
                )
                return nil
            }
            self.perform(self.state.workerReady(peer, capacity: Int(capacity), info: info, now: now))
            // The answer to READY, at once: the worker knows it is registered, and the broker's
            // heartbeat interval, within one round trip.
            self.sendToWorker(peer, self.heartbeatMessage)
            self.logger.info(
                known ? "worker re-registered" : "worker registered",
                metadata: [
                    "worker.id": "\(peer)", "worker.name": "\(info.name)", "slots": "\(capacity)",
                    "kinds": "\(info.kinds.joined(separator: ","))",
                ]
            )
        case .heartbeat:
            if !self.state.workerSeen(peer, now: now) {
                self.sendToWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY"))
            }
        case .disconnect(.draining, _):
            _ = self.state.workerSeen(peer, now: now)
            self.perform(self.state.workerDraining(peer))
            self.logger.info("worker draining", metadata: ["worker.id": "\(peer)"])
        case .disconnect(let reason, let text):
            if self.state.workers[peer] != nil {
                self.logger.info("worker left", metadata: ["worker.id": "\(peer)", "reason": "\(reason): \(text)"])
                self.perform(self.state.workerLost(peer, reason: "disconnected: \(reason)"))
            }
        case .result(let id, let attempt, let status, let meta, let body):
            let (disposition, entry) = self.resultArrived(
                from: peer,
                id,
                attempt: attempt,
                status: status,
                runMicroseconds: meta.durationMicroseconds,
                now: now
            )
            guard case .forward(let coordinator) = disposition else { return nil }
            guard let job = coordinator.job else { return Forward(coordinator: coordinator, result: id) }
            if let entry { self.jobAttemptEnded(job, entry, status, meta, body: body, now: now) }
        case .figures(let figures):
            if !self.state.workerFigures(peer, figures, now: now) {
                self.sendToWorker(peer, .disconnect(.unknownPeer, text: "unknown worker; send READY"))
            }
        case .progress(let id, let attempt, _):
            _ = self.state.workerSeen(peer, now: now)
            if let entry = self.state.tasks[id], entry.worker == peer, entry.attempt == attempt {
                return Forward(coordinator: entry.coordinator, result: nil)
            }
        case .submit, .accepted, .rejected, .task, .cancel, .statusRequest, .statusReply, .submitToJob, .jobQuery,
            .jobCancel, .jobName, .jobReply, .jobResult, .batch, .jobFigures:
            self.rejectInput(
                ProtocolError(.wrongDirection, "worker sent \(decoded.commandName)"),
                from: peer,
                side: "backend"
            )
        }
        return nil
    }
}
