import SkyNetCore
import Logging
import ZeroMQ

// Reading both ROUTERs: each message's sender (its routing-id frame, admitted by its key), decoded
// and handed to the machine. Without a journal a worker's RESULTs are checked in place and go on
// to their coordinators as they came (never decoded into Swift values, nothing re-encoded).
extension Broker {
    /// Reads what the frontend holds (the reactor's handler for it, with both sockets: see
    /// ``start()``).
    func drainFrontend(_ frontend: Socket, _ backend: Socket) {
        guard case .running = self.lifecycle else { return }
        var previousKind = self.lastSubmitKind
        defer { self.lastSubmitKind = previousKind }
        do throws(ZMQError) {
            try frontend.receiveBatch { message in
                guard let peer = self.routedPeer(message, front: true) else { return }
                let now = ContinuousClock.now
                do throws(ProtocolError) {
                    let form = try WireMessage.visit(message, from: 1) { frames throws(ProtocolError) in
                        // A BATCH's SUBMITs are read in place: a small input is kept without an array
                        // (``TaskBytes``), so a task costs the broker no allocation. (A closure written
                        // here, not held in a `let`: held, its context was allocated per message.)
                        try WireMessage.readTask(frames, .submit, previousKind: &previousKind) {
                            id,
                            attempt,
                            envelope,
                            input in
                            self.machine.coordinatorSubmit(
                                peer,
                                id,
                                attempt: attempt,
                                envelope,
                                input: TaskBytes(input),
                                readsAcceptedLists: Header.flags(of: frames[0]) & Header.readsAcceptedListsFlag != 0,
                                now: now
                            )
                            self.performEffects()
                            return true
                        }
                    } _: { decoded in
                        switch decoded {
                        case .success(let decoded):
                            self.machine.coordinator(peer, decoded, key: self.peerKeys[peer], now: now)
                            // At once, in order: a TASK is written while its task is as dispatched.
                            self.performEffects()
                        case .failure(let error):
                            self.machine.badInput(error, from: peer, side: "frontend")
                        }
                        return true
                    }
                    self.frontOutbox.heard(form, from: peer)
                    // A BATCH of SUBMITs may have filled every free slot: those TASKs leave now, not
                    // after the coordinator's next thousand SUBMITs have been handled too.
                    if form.isBatch { self.flushGathered(frontend, backend, workersOnly: true) }
                } catch {
                    self.machine.coordinatorBrokeProtocol(peer, error)
                    self.performEffects()
                }
            }
        } catch {
            self.logger.error("frontend receive failed", metadata: ["error": "\(error)"])
        }
    }

    /// Reads what the backend holds (the reactor's handler for it).
    func drainBackend(_ backend: Socket) {
        guard case .running = self.lifecycle else { return }
        do throws(ZMQError) {
            try backend.receiveBatch { message in
                let form = WireMessage.batchForm(message, from: 1)
                if !self.machine.durable, form.isBatch { return self.handleWorkerBatch(message, form: form) }
                if !self.machine.durable, message.count == 4, !message.overflowed, message.size(of: 1) == Header.size,
                    message.withBytes(of: 1, { $0[3] }) == Command.result.rawValue
                {
                    return self.handleWorkerResult(&message)
                }
                guard let peer = self.routedPeer(message, front: false) else { return }
                self.backOutbox.heard(form, from: peer)
                let now = ContinuousClock.now
                let decoded: WireMessage
                do throws(ProtocolError) {
                    decoded = try WireMessage.decode(message, from: 1)
                } catch {
                    self.machine.workerBrokeProtocol(peer, error, now: now)
                    return self.performEffects()
                }
                if case .batch(let messages) = decoded {
                    for frames in messages {
                        let inner: WireMessage
                        do throws(ProtocolError) {
                            inner = try WireMessage.decode(frames)
                        } catch {
                            self.machine.workerBrokeProtocol(peer, error, now: now)
                            break
                        }
                        let coordinator = self.machine.worker(peer, inner, frames: frames, now: now)
                        self.performEffects()
                        if let coordinator { self.sendFrames(frames, to: coordinator) }
                    }
                    self.performEffects()
                } else {
                    let coordinator = self.machine.worker(peer, decoded, frames: message.allBytes(from: 1), now: now)
                    self.performEffects()
                    if let coordinator { self.forwardToCoordinator(coordinator, &message) }
                }
            }
        } catch {
            self.logger.error("backend receive failed", metadata: ["error": "\(error)"])
        }
    }

    /// A worker's RESULT alone without a journal (a large one: small ones come in a BATCH, one or
    /// more): checked in place, and forwarded as it came, its frames moved, not copied.
    func handleWorkerResult(_ message: inout Multipart) {
        guard let peer = self.routedPeer(message, front: false) else { return }
        let checked = message.withFrames(from: 1) { frames in
            Result { () throws(ProtocolError) -> ResultView? in try ResultView(frames) }
        }
        switch checked {
        case .success(let result?):
            let coordinator = self.machine.result(
                from: peer,
                result.taskID,
                attempt: result.attempt,
                status: result.status,
                runMicroseconds: result.durationMicroseconds,
                now: .now
            )
            // The next TASK first (the credit cycle's critical path), as the state decided it.
            self.performEffects()
            if let coordinator { self.forwardToCoordinator(coordinator, &message) }
        case .success(nil):
            break
        case .failure(let error):
            self.machine.workerBrokeProtocol(peer, error, now: .now)
            self.performEffects()
        }
    }

    /// A worker's BATCH without a journal: its RESULTs are checked and forwarded in place, each
    /// appended to its coordinator's gathered messages as it came (no frames built, nothing
    /// re-encoded); anything else inside is decoded as usual. A bad message ends the BATCH and the
    /// worker, as it would alone.
    func handleWorkerBatch(_ message: borrowing Multipart, form: Batch.Form) {
        guard let peer = self.routedPeer(message, front: false) else { return }
        self.backOutbox.heard(form, from: peer)
        let now = ContinuousClock.now
        var failure: ProtocolError?
        do throws(ProtocolError) {
            try WireMessage.withBatch(message, from: 1, form: form) { bytes, count throws(ProtocolError) in
                try Batch.forEach(bytes, count: count) { packed in
                    guard failure == nil else { return }
                    do throws(ProtocolError) {
                        let coordinator: PeerID?
                        if let result = try ResultView(packed) {
                            coordinator = self.machine.result(
                                from: peer,
                                result.taskID,
                                attempt: result.attempt,
                                status: result.status,
                                runMicroseconds: result.durationMicroseconds,
                                now: now
                            )
                        } else {
                            // A PROGRESS goes on as it came; anything else is the machine's.
                            coordinator = self.machine.worker(
                                peer,
                                try WireMessage.decode(packed),
                                frames: [],
                                now: now
                            )
                        }
                        self.performEffects()
                        if let coordinator { self.forwardPacked(packed.raw, to: coordinator) }
                    } catch {
                        failure = error
                    }
                }
            }
        } catch {
            failure = error
        }
        if let failure {
            self.machine.workerBrokeProtocol(peer, failure, now: now)
            self.performEffects()
        }
    }

    /// The sender of a message on a ROUTER (its routing-id frame), or nil (counted and logged) when
    /// the message has no frame after it or too many frames, or its id is a new long one and the table
    /// of those is full (``PeerID/LongIDs``). Recent senders' ids are found by their bytes
    /// (``RecentPeers``).
    func routedPeer(_ message: borrowing Multipart, front: Bool) -> PeerID? {
        // The side is named only for a message refused (compared as a string on every message, ~40
        // instructions).
        guard message.count >= 2, !message.overflowed else {
            self.machine.badInput(
                ProtocolError(.badFrameCount, "\(message.count) frames"),
                from: nil,
                side: Self.side(front: front)
            )
            return nil
        }
        guard let peer = message.withBytes(of: 0, { self.recentPeers.peer($0) }) else {
            let error = ProtocolError(
                .invalidValue,
                "a new routing id over 16 bytes after \(PeerID.LongIDs.limit) others (SkyNet's peers use w-/c- and 30 hex digits)"
            )
            self.machine.badInput(error, from: nil, side: Self.side(front: front))
            return nil
        }
        return self.admit(message, from: peer, front: front) ? peer : nil
    }

    /// The name of a side in the broker's log.
    private static func side(front: Bool) -> String { front ? "frontend" : "backend" }
}
