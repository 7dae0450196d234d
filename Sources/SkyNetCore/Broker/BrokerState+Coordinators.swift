import DequeModule

// The coordinators' side of ``BrokerState``: who is connected, SUBMIT and CANCEL, a coordinator lost
// or recovered from the journal, detached jobs' owners, the snapshot for compaction.
extension BrokerState {
    // MARK: Coordinators

    /// Any message from a coordinator: it is alive. Returns true when it was not known before.
    @discardableResult
    package mutating func coordinatorSeen(_ id: PeerID, now: ContinuousClock.Instant) -> Bool {
        guard let entry = self.coordinators[id] else {
            self.coordinators[id] = CoordinatorEntry(id: id, lastSeen: now)
            return true
        }
        entry.lastSeen = now
        if entry.isAwaitingReconnect {
            entry.awaitingReconnect = nil
            return true
        }
        return false
    }

    /// ``coordinatorSeen(_:now:)`` for a SUBMIT, which needs the entry: one lookup for both.
    package mutating func seenCoordinator(_ id: PeerID, now: ContinuousClock.Instant) -> CoordinatorEntry {
        if let last = self.lastCoordinator, last.id == id {
            last.lastSeen = now
            if last.isAwaitingReconnect { last.awaitingReconnect = nil }
            return last
        }
        if let entry = self.coordinators[id] {
            entry.lastSeen = now
            entry.awaitingReconnect = nil
            self.lastCoordinator = entry
            return entry
        }
        let entry = CoordinatorEntry(id: id, lastSeen: now)
        self.coordinators[id] = entry
        return entry
    }

    /// The coordinator `id`, if known (the last one found is kept, see ``lastCoordinator``): a task's
    /// end and the bulk hold of its RESULT each ask for the owner of a task its SUBMIT just found, and
    /// comparing the id costs less than hashing it (~170 instructions a lookup).
    mutating func coordinator(_ id: PeerID) -> CoordinatorEntry? {
        if let last = self.lastCoordinator, last.id == id { return last }
        let found = self.coordinators[id]
        self.lastCoordinator = found
        return found
    }

    /// The live tasks of a coordinator (or a detached job), in id order. It looks at every task, so it
    /// is for rare events (a coordinator lost, a job cancelled), not the hot path.
    package func tasks(of coordinator: PeerID) -> [TaskID] {
        guard let entry = self.coordinators[coordinator], entry.taskCount > 0 else { return [] }
        var ids: [TaskID] = []
        ids.reserveCapacity(entry.taskCount)
        self.tasks.forEach { if $0.coordinator == coordinator { ids.append($0.id) } }
        return ids.sorted()
    }

    /// Makes `id` the owner of a detached job's tasks: it never expires.
    package mutating func registerJob(_ id: PeerID, now: ContinuousClock.Instant) {
        let entry = self.coordinators[id] ?? CoordinatorEntry(id: id, lastSeen: now)
        self.coordinators[id] = entry
        entry.awaitingReconnect = nil
    }

    /// Drops a detached job that holds no tasks any more.
    package mutating func forgetJob(_ id: PeerID) {
        guard self.coordinators[id]?.taskCount == 0 else { return }
        self.coordinators[id] = nil
    }

    /// Queues a task recovered from the journal, for a coordinator that has until `graceUntil` to
    /// reconnect. Returns false when the id is already here.
    package mutating func recover(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: TaskBytes,
        coordinator: PeerID,
        graceUntil: ContinuousClock.Instant
    ) -> Bool {
        guard self.tasks[id] == nil else { return false }
        if self.coordinators[coordinator] == nil {
            self.coordinators[coordinator] = CoordinatorEntry(
                id: coordinator,
                lastSeen: graceUntil,
                awaitingReconnect: graceUntil
            )
        }
        guard let registered = self.coordinators[coordinator] else { return false }
        self.enqueue(id, attempt: attempt, envelope: envelope, input: input, owner: registered)
        self.figures.recovered += 1
        return true
    }

    /// Adds a new task of `owner`'s to the table, leased to `worker` or queued (nil), and counts it
    /// as the coordinator's; returns its slot and its ticket.
    mutating func addTask(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: TaskBytes,
        owner: CoordinatorEntry,
        worker: PeerID? = nil
    ) -> (slot: UInt32, ticket: UInt64) {
        let ticket = self.nextTicket()
        let entry = TaskEntry(
            id: id,
            coordinator: owner.id,
            envelope: envelope,
            input: input,
            attempt: attempt,
            queuedAt: self.clock,
            worker: worker,
            ticket: ticket
        )
        let slot = self.tasks.add(entry)
        owner.taskCount += 1
        return (slot, ticket)
    }

    /// Queues a new task for `owner` at the tail of its kind's queue; returns its slot in the table.
    @discardableResult
    private mutating func enqueue(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: TaskBytes,
        owner: CoordinatorEntry
    ) -> UInt32 {
        let (slot, ticket) = self.addTask(id, attempt: attempt, envelope: envelope, input: input, owner: owner)
        // Not the entry's coordinator: the entry moved into the table, and reading it after made a copy.
        self.append(
            .init(slot: slot, ticket: ticket),
            priority: envelope.priority,
            owner: owner.id,
            kind: envelope.kind
        )
        self.queuedCount += 1
        return slot
    }

    /// Tasks in flight: queued or leased.
    package var inFlight: Int { self.tasks.count }

    /// The live tasks (queued or leased) in queue order, as journal records for a snapshot.
    package func snapshot() -> [JournalRecord] {
        self.tasks.values.sorted { $0.ticket < $1.ticket }.map {
            .submit($0.id, coordinator: $0.coordinator, attempt: $0.attempt, $0.envelope, input: $0.input.array)
        }
    }

    /// Whether this coordinator was expired for silence and has not been told yet; telling it (the
    /// caller sends DISCONNECT "unknown peer") is then due, once.
    package mutating func takeExpiredNotice(_ id: PeerID) -> Bool {
        guard !self.expired.isEmpty, self.expired.remove(id) != nil else { return false }
        return true
    }

    /// A SUBMIT. Re-submitting a task the broker still holds for the same coordinator is accepted
    /// again without queueing it twice (a resend after a reconnect).
    package mutating func submit(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: TaskBytes,
        from coordinator: PeerID,
        now: ContinuousClock.Instant
    ) -> [Action] {
        var actions: [Action] = []
        self.submit(id, attempt: attempt, envelope: envelope, input: input, from: coordinator, now: now, into: &actions)
        return actions
    }

    /// ``submit(_:attempt:envelope:input:from:now:)``, its actions appended to `actions` (the
    /// machine's reused buffer: no array per task).
    package mutating func submit(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: TaskBytes,
        from coordinator: PeerID,
        readsAcceptedLists: Bool = false,
        now: ContinuousClock.Instant,
        into actions: inout [Action]
    ) {
        self.advance(to: now)
        let registered = self.seenCoordinator(coordinator, now: now)
        if readsAcceptedLists && !registered.readsAcceptedLists { registered.readsAcceptedLists = true }
        guard attempt >= 1, attempt <= UInt32(envelope.maxAttempts) else {
            self.figures.rejected += 1
            actions.append(
                .rejected(
                    coordinator: coordinator,
                    id,
                    .invalid,
                    "attempt \(attempt) of a task with \(envelope.maxAttempts) attempts"
                )
            )
            return
        }
        if let (owner, existingAttempt) = self.tasks.withEntry(id, { ($0.coordinator, $0.attempt) }) {
            guard owner == coordinator else {
                self.figures.rejected += 1
                actions.append(
                    .rejected(
                        coordinator: coordinator,
                        id,
                        .duplicateID,
                        "task id \(id) belongs to another coordinator"
                    )
                )
                return
            }
            actions.append(.accepted(coordinator: coordinator, id, attempt: existingAttempt, requeued: false))
            return
        }
        guard self.queuedCount < self.maxQueued else {
            self.figures.rejected += 1
            actions.append(.rejected(coordinator: coordinator, id, .queueFull, "queue full (\(self.maxQueued) tasks)"))
            return
        }
        guard registered.taskCount < self.maxPerCoordinator else {
            self.figures.rejected += 1
            actions.append(
                .rejected(
                    coordinator: coordinator,
                    id,
                    .queueFull,
                    "this coordinator has \(registered.taskCount) tasks at the broker, its limit (--max-queued-per-coordinator)"
                )
            )
            return
        }
        self.figures.submitted += 1
        // Dispatch first: the TASK leaves before the ACCEPTED, which saves the worker a few
        // microseconds on every short task (the ACCEPTED still reaches the coordinator long before the
        // RESULT, which has to come back from the worker).
        let slot: UInt32
        if let worker = self.freeWorker(for: envelope.kind) {
            slot = self.leaseAtOnce(
                id,
                attempt: attempt,
                envelope: envelope,
                input: input,
                owner: registered,
                to: worker,
                into: &actions
            )
        } else {
            slot = self.enqueue(id, attempt: attempt, envelope: envelope, input: input, owner: registered)
            self.dispatch(into: &actions)
        }
        actions.append(.accepted(coordinator: coordinator, id, attempt: attempt, requeued: false, hint: SlotHint(slot)))
    }

    /// Connected coordinators (detached jobs, which own tasks but never connect, not counted).
    package var connectedCoordinators: Int { self.coordinators.values.reduce(0) { $0 + ($1.detached ? 0 : 1) } }

    /// A CANCEL from a coordinator for one of its tasks.
    package mutating func cancel(_ id: TaskID, from coordinator: PeerID) -> [Action] {
        guard let entry = self.tasks[id], entry.coordinator == coordinator else { return [] }
        if let worker = entry.worker {
            // The worker answers with RESULT(cancelled), which is forwarded as the attempt's result.
            return [.cancelOnWorker(worker: worker, id)]
        }
        self.remove(id)
        self.figures.ended(.cancelled)
        return [
            .resultForCoordinator(coordinator: coordinator, id, attempt: entry.attempt, .cancelled, reason: "cancelled")
        ]
    }

    /// A coordinator is gone: drop its queued tasks and cancel its running ones.
    package mutating func coordinatorLost(_ id: PeerID) -> [Action] {
        guard let lost = self.coordinators[id] else { return [] }
        if let job = lost.job {
            self.jobEnded(EndedJob(coordinator: lost.id, figures: job, ended: lost.lastSeen, left: true))
        }
        let ids = self.tasks(of: id)
        self.coordinators[id] = nil
        self.figures.coordinatorsLost += 1
        var actions: [Action] = []
        for taskID in ids {
            guard let entry = self.tasks[taskID] else { continue }
            if let worker = entry.worker {
                actions.append(.cancelOnWorker(worker: worker, taskID))
                // The scan goes on until the worker answers the CANCEL: its slot stays taken, as an
                // abandoned lease, so that the same task submitted again is not confused with it.
                if let holder = self.workers[worker], holder.leases.remove(taskID) != nil {
                    holder.stuck[taskID] = entry.attempt
                }
            }
            self.remove(taskID)
            self.figures.ended(.cancelled)
        }
        return actions
    }
}
