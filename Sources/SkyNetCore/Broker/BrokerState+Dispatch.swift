// Dispatch: queued tasks leased to the workers with credit, the queues by kind, and the list of
// workers with credit.
extension BrokerState {
    mutating func dispatch(into actions: inout [Action]) {
        // No worker with credit: nothing to look at (about half the calls under load, each of which
        // took the queue and its kind out, retained and released, ~100 instructions).
        guard self.queuedCount > 0, !self.withCredit.isEmpty, !self.dispatchPaused else { return }
        if self.queues.count == 1, let queue = self.lastQueue ?? self.queues.first?.value {
            // The usual case, without copying the keys or hashing the kind: the one queue is the
            // last one asked for whenever that is kept (it is only while in ``queues``); finding
            // it as the dictionary's first cost ~240 instructions a task.
            self.dispatch(queue.kind, queue, into: &actions)
            return
        }
        for kind in Array(self.queues.keys) {
            if let queue = self.queues[kind] { self.dispatch(kind, queue, into: &actions) }
        }
    }

    mutating func dispatch(_ kind: String, _ queue: TaskQueue, into actions: inout [Action]) {
        while !queue.isEmpty {
            guard let workerID = Self.bestWorker(among: self.withCredit, for: kind) else { break }
            // The live item is leased as it is found (one lookup of its id for both).
            var leased: (id: TaskID, queuedAt: UInt32)?
            let item = queue.popFirst { item in
                leased = self.tasks.leaseIfQueued(slot: item.slot, ticket: item.ticket, to: workerID.id)
                return leased != nil
            }
            guard let item, let (id, queuedAt) = leased else { break }
            self.queuedCount -= 1
            self.leased(id, slot: item.slot, queuedAt: queuedAt, kind: queue.figures, to: workerID, into: &actions)
        }
        // The one queue stays when it empties (and keeps its storage); with several kinds, empty
        // ones go.
        if queue.isEmpty, self.queues.count > 1 {
            self.queues[kind] = nil
            if self.lastQueue === queue { self.lastQueue = nil }
        }
    }

    /// The worker a task of `kind` arriving now is leased to at once
    /// (``leaseAtOnce(_:attempt:envelope:input:owner:to:into:)``), if any: only while nothing is
    /// queued and dispatch runs, so it is the worker that queueing the task and dispatching would give
    /// it (no queued task of any kind or priority goes before it).
    func freeWorker(for kind: String) -> WorkerEntry? {
        guard self.queuedCount == 0, !self.withCredit.isEmpty, !self.dispatchPaused else { return nil }
        return Self.bestWorker(among: self.withCredit, for: kind)
    }

    /// Adds a new task for `owner` leased to `worker` (from ``freeWorker(for:)``) without going
    /// through its kind's queue (an append, a pop, the pop's lease of the item and the dispatch loop:
    /// ~650 instructions a task on a latency round trip); returns its slot in the table.
    mutating func leaseAtOnce(
        _ id: TaskID,
        attempt: UInt32,
        envelope: TaskEnvelope,
        input: TaskBytes,
        owner: CoordinatorEntry,
        to worker: WorkerEntry,
        into actions: inout [Action]
    ) -> UInt32 {
        let (slot, _) = self.addTask(
            id,
            attempt: attempt,
            envelope: envelope,
            input: input,
            owner: owner,
            worker: worker.id
        )
        // Its kind's queue is made if there is none, as queueing the task would have.
        let kind = self.queue(for: envelope.kind).figures
        self.leased(id, slot: slot, queuedAt: self.clock, kind: kind, to: worker, into: &actions)
        return slot
    }

    /// A task just leased to `worker` (its entry names the worker): its wait recorded in its kind's
    /// figures, the worker's load and credit updated, and its TASK sent. Both ways a task is leased
    /// (from its queue, or at once as it arrives) come here.
    private mutating func leased(
        _ id: TaskID,
        slot: UInt32,
        queuedAt: UInt32,
        kind: KindFigures,
        to worker: WorkerEntry,
        into actions: inout [Action]
    ) {
        kind.queueWait.record(microseconds: UInt64(Self.elapsed(from: queuedAt, to: self.clock)) * 1000)
        self.useCounter += 1
        worker.load.lease(id, use: self.useCounter)
        self.refreshCredit(worker)
        self.figures.dispatched += 1
        actions.append(.dispatch(worker: worker.id, id, hint: SlotHint(slot)))
    }

    /// Appends to the queue for `kind` (``queue(for:)``): where it lies when it is the last one asked
    /// for (the usual case; returned, it was retained and released, ~60 instructions a SUBMIT).
    mutating func append(_ item: TaskQueue.Item, priority: Int32, owner: PeerID, kind: String) {
        if self.lastQueue?.kind == kind {
            self.lastQueue?.append(item, priority: priority, owner: owner)
        } else {
            self.queue(for: kind).append(item, priority: priority, owner: owner)
        }
    }

    /// The queue for `kind`, made when there is none.
    mutating func queue(for kind: String) -> TaskQueue {
        if let last = self.lastQueue, last.kind == kind { return last }
        let queue: TaskQueue
        if let existing = self.queues[kind] {
            queue = existing
        } else {
            queue = TaskQueue(kind: kind, figures: self.kindFigures(for: kind))
            self.queues[kind] = queue
        }
        self.lastQueue = queue
        return queue
    }

    /// The registered worker `id`, if any (the last one found is kept, see ``lastWorker``).
    mutating func worker(_ id: PeerID) -> WorkerEntry? {
        if let last = self.lastWorker, last.id == id { return last }
        let found = self.workers[id]
        self.lastWorker = found
        return found
    }

    /// Keeps ``withCredit`` true for a registered worker after its credit may have changed.
    mutating func refreshCredit(_ worker: WorkerEntry) {
        let (hasCredit, index) = worker.load.settle()
        if hasCredit {
            guard index < 0 else { return }
            worker.load.creditIndex = self.withCredit.count
            self.withCredit.append(worker)
        } else if index >= 0 {
            self.unlist(worker, at: index)
        }
    }

    /// Takes `worker` out of ``withCredit`` (the last one takes its place).
    mutating func unlistCredit(_ worker: WorkerEntry) {
        let index = worker.load.creditIndex
        guard index >= 0 else { return }
        self.unlist(worker, at: index)
    }

    private mutating func unlist(_ worker: WorkerEntry, at index: Int) {
        worker.load.creditIndex = -1
        let last = self.withCredit.removeLast()
        if last !== worker {
            last.load.creditIndex = index
            self.withCredit[index] = last
        }
    }

    /// The worker among `withCredit` (``withCredit``) that scans `kind`, fewest leases first, then
    /// least recently used: a result frees one, so with a hundred busy workers it looks at few.
    /// Static, over the array: as a method, the dispatch loop (a mutating one) called it on a copy
    /// of the whole state, 369 bytes, made for every task.
    static func bestWorker(among withCredit: [WorkerEntry], for kind: String) -> WorkerEntry? {
        var best: WorkerEntry?
        var bestKey = (leases: Int.max, lastUsed: UInt64.max)
        for worker in withCredit {
            guard let key = worker.load.rank, key < bestKey, worker.scans(kind) else { continue }
            best = worker
            bestKey = key
        }
        return best
    }
}
