import SkyNetCore
import Logging
import ZeroMQ

// Carrying out the machine's effects, and sending: every message goes through a side's
// ``Outbox``, which gathers a reactor turn's messages per peer into one BATCH, parks what cannot go
// now (in order, retried every 2 ms), and reports peers that are gone.
extension Broker {
    /// Carries out what the machine decided, in order. Carrying out one may report back to the
    /// machine (a send finds its peer gone): what that decides is carried out in the same call; a
    /// call from inside does nothing (the outer one goes on).
    func performEffects() {
        self.syncAcceptedHold()
        guard !self.performingEffects, !self.machine.effects.isEmpty else { return }
        self.performingEffects = true
        defer { self.performingEffects = false }
        repeat {
            self.machine.takeEffects(into: &self.effectBuffer)
            for effect in self.effectBuffer { self.perform(effect) }
            self.effectBuffer.removeAllKeepingCapacity()
        } while !self.machine.effects.isEmpty
    }

    // Always inlined into the loop above: called, each effect was copied out of the buffer first
    // (~170 instructions a task of a deep job, when the outbox's growth tipped the inliner).
    @inline(__always)
    private func perform(_ effect: BrokerMachine.Effect) {
        switch effect {
        case .task(let worker, let id, let hint):
            self.sendTask(id, to: worker, hint: hint)
        case .toWorker(let worker, let message):
            self.sendToWorker(worker, message)
        case .toCoordinator(let coordinator, let message):
            self.sendToCoordinator(coordinator, message)
        case .frames(let coordinator, let frames, let keep):
            self.sendFrames(frames, to: coordinator, keepingResult: keep)
        case .statusReply(let peer):
            self.sendToCoordinator(peer, .statusReply(json: self.status().json()))
        case .journal(let record):
            // The journal numbers records as the machine does: the k-th appended is k.
            let seq = self.journal?.append(record) ?? self.etcdJournal?.append(record)
            self.journaled += 1
            assert(seq == nil || seq == self.journaled, "the journal and the machine count alike")
        case .accepted(let held, let list):
            self.sendAccepted(held, list: list)
        case .dropOutbox(let peer, let front):
            if front { self.frontOutbox.drop(peer) } else { self.backOutbox.drop(peer) }
        }
    }

    /// Arms the ACCEPTED hold's timer for ``BrokerMachine/acceptedHold`` from now when the machine
    /// starts holding first ACCEPTEDs (``BrokerMachine/holdsAccepted``). One timer, made at the first
    /// hold. A hold that ends before it fires leaves it armed: it then fires once with nothing held
    /// (which sends nothing), unless the next hold moved it first. Disarmed at the end of each hold
    /// and armed at the start of the next, it cost a second search of the timers and a second
    /// re-arm of the timerfd every round trip of single tasks (~120 instructions).
    private func syncAcceptedHold() {
        let holds = self.machine.holdsAccepted
        guard holds != self.acceptedHoldArmed else { return }
        self.acceptedHoldArmed = holds
        guard holds else { return }
        let timer = self.acceptedTimer ?? self.reactor.makeTimer(self.acceptedTimerFired)
        self.acceptedTimer = timer
        self.reactor.rearm(timer, after: BrokerMachine.acceptedHold)
    }

    /// Sends encoded frames to a coordinator. A RESULT (`keepingResult`) that cannot be delivered is
    /// the machine's to keep (``BrokerMachine/undeliverable(_:frames:result:now:)``).
    func sendFrames(_ frames: [[UInt8]], to coordinator: PeerID, keepingResult id: TaskID? = nil) {
        // A RESULT kept if it cannot be delivered needs to know now; anything else is gathered.
        let put = self.putForCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            id == nil
                ? try outbox.enqueue(frames, to: coordinator, on: frontend)
                : try outbox.sendNow(frames, to: coordinator, on: frontend)
        }
        guard let outcome = put else { return }
        if case .unreachable = outcome, let id {
            self.machine.undeliverable(coordinator, frames: frames, result: id, now: .now)
            return self.performEffects()
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

    /// Sends one coordinator's held ACCEPTEDs (``BrokerMachine/Effect/accepted(_:list:)``), as the
    /// machine said: one list, or one message each, written straight into its BATCH within one access
    /// to the outbox. Built as messages and sent one by one they cost ~750 instructions each.
    func sendAccepted(_ held: [BrokerMachine.HeldAccepted], list: Bool) {
        guard let coordinator = held.first?.coordinator else { return }
        self.toCoordinator(coordinator) { outbox, frontend throws(ZMQError) in
            if list {
                return try outbox.enqueue(to: coordinator, on: frontend) { writer in
                    writer.appendAcceptedList(count: held.count) {
                        AcceptedTask(held[$0].id, attempt: held[$0].attempt)
                    }
                }
            }
            var outcome = Outbox.Outcome.gathered
            for accepted in held {
                let next = try outbox.enqueue(to: coordinator, on: frontend) { writer in
                    writer.appendAccepted(accepted.id, attempt: accepted.attempt)
                }
                switch next {
                case .unreachable: return .unreachable
                case .parked: outcome = .parked
                case .sent, .gathered: break
                }
            }
            return outcome
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
    func sendTask(_ id: TaskID, to worker: PeerID, hint: SlotHint) {
        // The state's case only: the back socket is taken out of `lifecycle` when it is needed (a
        // full BATCH, a large input). Taken out for every TASK, it and the front socket were
        // retained and released each time (~120 instructions a TASK).
        guard case .running = self.lifecycle else { return }
        // Not the generic `withEntry`: this module's call of it would not be specialized.
        var result: Result<Outbox.Outcome, ZMQError>?
        var full = false
        _ = self.machine.visitTask(id, hint: hint) { entry in
            // Fields read through the pointer, one by one (`entry.pointee` whole would be a copy).
            // `do`/`catch`, not `Result { … }`: an isolated closure handed to the standard library
            // (not built in Swift 6 mode) checks at run time that it runs on this actor's executor
            // (SE-0423), ~400 instructions per TASK.
            if entry.pointee.input.count + 128 > Outbox.batchableBytes {
                guard case .running(_, let backend, _) = self.lifecycle else { return }
                do throws(ZMQError) {
                    let frames = WireMessage.task(
                        id,
                        attempt: entry.pointee.attempt,
                        entry.pointee.envelope,
                        input: entry.pointee.input.array
                    ).encode()
                    result = .success(try self.backOutbox.enqueue(frames, to: worker, on: backend))
                } catch {
                    result = .failure(error)
                }
            } else {
                full = self.backOutbox.gather(to: worker) { writer in
                    writer.appendTask(
                        id,
                        attempt: entry.pointee.attempt,
                        entry.pointee.envelope,
                        input: entry.pointee.input
                    )
                }
                result = .success(.gathered)
            }
        }
        if full, case .running(_, let backend, _) = self.lifecycle {
            do throws(ZMQError) {
                result = .success(try self.backOutbox.sendFull(worker, on: backend))
            } catch {
                result = .failure(error)
            }
        }
        switch result {
        case .success(let outcome)?: self.handle(outcome, peer: worker, front: false)
        case .failure(let error)?:
            self.logger.error("send to worker failed", metadata: ["worker.id": "\(worker)", "error": "\(error)"])
        case nil: break
        }
    }

    func handle(_ outcome: Outbox.Outcome, peer: PeerID, front: Bool) {
        switch outcome {
        case .sent, .gathered: break
        case .parked: self.armFlush()
        case .unreachable: self.peerUnreachable(peer, front: front)
        }
    }

    /// A send found `peer` gone: the machine loses it (a worker's leases are requeued, a
    /// coordinator's tasks dropped).
    func peerUnreachable(_ peer: PeerID, front: Bool) {
        let now = ContinuousClock.now
        if front {
            self.machine.coordinatorUnreachable(peer, now: now)
        } else {
            self.logger.info("worker unreachable", metadata: ["worker.id": "\(peer)"])
            self.machine.workerLost(peer, reason: "unreachable", now: now)
        }
        self.performEffects()
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
    /// The sockets come from the caller (the reactor's hook and handlers hold them): taken out of
    /// `lifecycle` here, each was retained and released.
    func flushGathered(_ frontend: Socket, _ backend: Socket, all: Bool = false, workersOnly: Bool = false) {
        // Most turns gathered nothing (every turn ends here, before the poll).
        guard self.backOutbox.hasPending || (!workersOnly && self.frontOutbox.hasPending) else { return }
        guard case .running = self.lifecycle else { return }
        if workersOnly {
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

    /// Whether what is gathered for a coordinator waits (``BrokerMachine/holdForBulk(_:now:)``).
    func holdForBulk(_ coordinator: PeerID, now: ContinuousClock.Instant) -> Bool {
        switch self.machine.holdForBulk(coordinator, now: now) {
        case .send: return false
        case .hold(let wakeAfter):
            if let wakeAfter {
                self.bulkTimer = self.reactor.schedule(after: wakeAfter) { [weak self] in
                    // Only the wake-up is needed: the flush runs before the next poll.
                    self?.assumeIsolated { broker in
                        broker.bulkTimer = nil
                        broker.machine.bulkWoke()
                    }
                }
            }
            return true
        }
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
