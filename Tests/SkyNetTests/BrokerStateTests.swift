import Testing

@testable import SkyNet
@testable import SkyNetCore

@Suite("Broker state machine")
struct BrokerStateTests {
    let t0 = ContinuousClock.now
    let coordinator = PeerID(Array("c-1".utf8))
    let workerA = PeerID(Array("w-a".utf8))
    let workerB = PeerID(Array("w-b".utf8))

    func info(_ name: String, kinds: [String] = ["sector"]) -> ReadyInfo {
        ReadyInfo(name: name, kinds: kinds, heartbeatMilliseconds: 1000, version: "test")
    }

    func submit(
        _ state: inout BrokerState,
        _ count: Int,
        kind: String = "sector",
        priority: Int32 = 0,
        maxAttempts: UInt16 = 3,
        from coordinator: PeerID? = nil
    )
        -> [TaskID]
    {
        (0..<count).map { _ in
            let id = TaskID.random()
            _ = self.submitOne(&state, id, maxAttempts: maxAttempts, kind: kind, priority: priority, from: coordinator)
            return id
        }
    }

    /// One SUBMIT of `id` (kind sector unless given), from the test's coordinator unless given.
    func submitOne(
        _ state: inout BrokerState,
        _ id: TaskID,
        attempt: UInt32 = 1,
        maxAttempts: UInt16 = 3,
        kind: String = "sector",
        priority: Int32 = 0,
        from coordinator: PeerID? = nil
    ) -> [BrokerState.Action] {
        state.submit(
            id,
            attempt: attempt,
            envelope: TaskEnvelope(kind: kind, priority: priority, maxAttempts: maxAttempts),
            input: [],
            from: coordinator ?? self.coordinator,
            now: self.t0
        )
    }

    func dispatched(_ actions: [BrokerState.Action]) -> [(PeerID, TaskID)] {
        actions.compactMap { if case .dispatch(let w, let id, _) = $0 { (w, id) } else { nil } }
    }

    @Test("a worker never gets more tasks than its capacity; results return credit")
    func creditCap() {
        var state = BrokerState()
        let ids = self.submit(&state, 10)
        let first = self.dispatched(state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0))
        #expect(first.map(\.1) == Array(ids.prefix(4)))
        #expect(state.workers[self.workerA]?.leases.count == 4)
        #expect(state.queueDepth == 6)
        let (disposition, actions) = state.workerResult(
            self.workerA,
            taskID: ids[0],
            attempt: 1,
            status: .completed,
            now: self.t0
        )
        #expect(disposition == .forward(coordinator: self.coordinator))
        #expect(self.dispatched(actions).map(\.1) == [ids[4]])
        #expect(state.workers[self.workerA]?.leases.count == 4)
    }

    @Test("the task counters reconcile: accepted = completed + failed + cancelled (queued or dropped) + in flight")
    func countersReconcile() {
        var state = BrokerState()
        let other = PeerID(Array("c-2".utf8))
        let ids = self.submit(&state, 6, maxAttempts: 1)
        let theirs = self.submit(&state, 2, from: other)
        func reconciles() -> Bool {
            let c = state.figures
            return c.submitted + c.recovered == c.resultsCompleted + c.resultsFailed + c.resultsCancelled
                + state.inFlight
        }
        #expect(reconciles())
        let running = self.dispatched(state.workerReady(self.workerA, capacity: 2, info: self.info("a"), now: self.t0))
        #expect(running.count == 2)
        _ = state.workerResult(self.workerA, taskID: running[0].1, attempt: 1, status: .completed, now: self.t0)
        // Cancelled while queued: no worker RESULT, the broker's own cancelled.
        _ = state.cancel(ids[5], from: self.coordinator)
        #expect(state.figures.resultsCancelled == 1 && reconciles())
        // A lost worker's last attempt (one attempt allowed) fails at the broker, or is requeued.
        _ = state.workerLost(self.workerA, reason: "test")
        #expect(reconciles(), "\(state.figures), \(state.inFlight) in flight")
        // The other coordinator goes: its tasks at the broker are dropped, counted cancelled.
        let theirsLeft = theirs.filter { state.tasks[$0] != nil }.count
        let cancelledBefore = state.figures.resultsCancelled
        _ = state.coordinatorLost(other)
        #expect(reconciles(), "\(state.figures), \(state.inFlight) in flight")
        #expect(state.figures.resultsCompleted == 1)
        #expect(state.figures.resultsCancelled == cancelledBefore + theirsLeft)
        #expect(state.figures.resultsForwarded == 1, "only worker RESULTs are forwarded ones")
    }

    @Test(
        "task totals count jobs as they report themselves, ended ones kept, the unfinished of one that left cancelled"
    )
    func taskTotals() {
        var state = BrokerState()
        let other = PeerID(Array("c-2".utf8))
        state.coordinatorJob(
            self.coordinator,
            JobFigures(serial: 1, name: "a", tasks: 20, completed: 18, failed: 0, cancelled: 0),
            now: self.t0
        )
        state.coordinatorJob(
            other,
            JobFigures(serial: 1, name: "b", tasks: 5, completed: 2, failed: 1, cancelled: 0),
            now: self.t0
        )
        // The first coordinator's local retries complete its job; the second leaves mid-job.
        state.coordinatorJob(
            self.coordinator,
            JobFigures(serial: 1, name: "a", tasks: 20, completed: 20, failed: 0, cancelled: 0),
            now: self.t0
        )
        _ = state.coordinatorLost(other)
        var status = BrokerStatus(state: state, epoch: 1, badInput: [:], parked: 0)
        #expect(status.taskTotals.tasks == 25 && status.taskTotals.completed == 22)
        #expect(status.taskTotals.failed == 1 && status.taskTotals.cancelled == 2 && status.taskTotals.unfinished == 0)
        // A next job of the first coordinator: the ended one stays counted.
        state.coordinatorJob(
            self.coordinator,
            JobFigures(serial: 2, name: "a", tasks: 3, completed: 0, failed: 0, cancelled: 0),
            now: self.t0
        )
        status = BrokerStatus(state: state, epoch: 1, badInput: [:], parked: 0)
        #expect(status.taskTotals.tasks == 28 && status.taskTotals.unfinished == 3)
    }

    @Test("tasks go to the least loaded worker, ties to the least recently used")
    func leastLoaded() {
        var state = BrokerState()
        _ = state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0)
        _ = state.workerReady(self.workerB, capacity: 4, info: self.info("b"), now: self.t0)
        var counts: [PeerID: Int] = [:]
        for _ in 0..<6 {
            let id = TaskID.random()
            for (worker, _) in self.dispatched(
                state.submit(
                    id,
                    attempt: 1,
                    envelope: TaskEnvelope(kind: "sector"),
                    input: [],
                    from: self.coordinator,
                    now: self.t0
                )
            ) {
                counts[worker, default: 0] += 1
            }
        }
        #expect(counts[self.workerA] == 3)
        #expect(counts[self.workerB] == 3)
    }

    @Test("a task arriving while a worker is free is leased at once; one arriving behind others waits its turn")
    func leasedAtOnce() {
        var state = BrokerState()
        _ = state.workerReady(self.workerA, capacity: 1, info: self.info("a"), now: self.t0)
        let first = TaskID.random()
        let second = TaskID.random()
        let atOnce = self.submitOne(&state, first)
        // The TASK goes before the ACCEPTED, as for a task taken from its queue.
        #expect(atOnce.count == 2)
        #expect(self.dispatched(Array(atOnce.prefix(1))).map(\.1) == [first])
        #expect(state.queueDepth == 0)
        // The worker is full: the next task waits, and goes when the first one's result frees it.
        #expect(self.dispatched(self.submitOne(&state, second)).isEmpty)
        #expect(state.queueDepth == 1)
        let (_, actions) = state.workerResult(self.workerA, taskID: first, attempt: 1, status: .completed, now: self.t0)
        #expect(self.dispatched(actions).map(\.1) == [second])
        // Counted the same both ways: two dispatched, two queue waits in the kind's figures.
        #expect(state.figures.dispatched == 2)
        #expect(state.kindFigures(now: self.t0)["sector"]?.queueWait.count == 2)
        #expect(state.queueDepth == 0)
    }

    @Test("only workers that scan the kind get it")
    func kinds() {
        var state = BrokerState()
        _ = state.workerReady(self.workerA, capacity: 4, info: self.info("a", kinds: ["echo"]), now: self.t0)
        let ids = self.submit(&state, 1, kind: "sector")
        #expect(state.queueDepth == 1)
        let actions = state.workerReady(self.workerB, capacity: 4, info: self.info("b"), now: self.t0)
        #expect(self.dispatched(actions).map(\.0) == [self.workerB])
        #expect(self.dispatched(actions).map(\.1) == ids)
    }

    @Test("higher priority runs first, equal priorities in order")
    func priorities() {
        var state = BrokerState()
        let low = self.submit(&state, 2, priority: 0)
        let high = self.submit(&state, 2, priority: 5)
        let actions = state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0)
        #expect(self.dispatched(actions).map(\.1) == high + low)
    }

    @Test("a lost worker's leases are requeued first with attempt + 1, and the coordinator is told")
    func requeueOnLoss() {
        var state = BrokerState()
        let ids = self.submit(&state, 6)
        _ = state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0)
        let actions = state.workerLost(self.workerA, reason: "test")
        let requeued = actions.compactMap { action -> (TaskID, UInt32)? in
            if case .accepted(_, let id, let attempt, true, _) = action { return (id, attempt) }
            return nil
        }
        #expect(Set(requeued.map(\.0)) == Set(ids.prefix(4)))
        #expect(requeued.allSatisfy { $0.1 == 2 })
        #expect(state.queueDepth == 6)
        // The next worker gets the requeued tasks before the ones that never ran.
        let next = self.dispatched(state.workerReady(self.workerB, capacity: 4, info: self.info("b"), now: self.t0))
        #expect(Set(next.map(\.1)) == Set(ids.prefix(4)))
        #expect(state.tasks[ids[0]]?.attempt == 2)
        // A late result from the lost worker's attempt is stale.
        let (late, _) = state.workerResult(self.workerA, taskID: ids[0], attempt: 1, status: .completed, now: self.t0)
        #expect(late == .unknownWorker)
        let (wrongAttempt, _) = state.workerResult(
            self.workerB,
            taskID: ids[0],
            attempt: 1,
            status: .completed,
            now: self.t0
        )
        #expect(wrongAttempt == .stale)
    }

    @Test("a lease on its last attempt is failed to the coordinator instead of requeued")
    func requeueRespectsMaxAttempts() {
        var state = BrokerState()
        let ids = self.submit(&state, 1, maxAttempts: 1)
        _ = state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0)
        let actions = state.workerLost(self.workerA, reason: "gone")
        guard case .resultForCoordinator(let c, let id, 1, .failed, let reason) = actions.first else {
            Issue.record("expected a failed result, got \(actions)")
            return
        }
        #expect(c == self.coordinator && id == ids[0] && reason.contains("lost"))
        #expect(state.tasks.isEmpty)
    }

    @Test("silent workers expire after 3 heartbeats; silent coordinators after 10 s lose their tasks and are told once")
    func expiry() {
        var state = BrokerState(heartbeat: Heartbeat(interval: .seconds(1), liveness: 3))
        let ids = self.submit(&state, 5)
        _ = state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0)
        #expect(state.tick(now: self.t0 + .milliseconds(2900)).isEmpty)
        let seen = state.workerSeen(self.workerA, now: self.t0 + .milliseconds(2900))
        #expect(seen)
        state.coordinatorSeen(self.coordinator, now: self.t0 + .milliseconds(2900))
        let expired = state.tick(now: self.t0 + .milliseconds(6000))
        #expect(state.workers.isEmpty)
        #expect(expired.contains(.disconnect(self.workerA, .unknownPeer, "missed 3 heartbeats")))
        #expect(state.coordinators.count == 1, "coordinators are kept for at least 10 s")
        let dropped = state.tick(now: self.t0 + .milliseconds(13_000))
        #expect(state.coordinators.isEmpty)
        #expect(state.tasks.isEmpty, "the coordinator is gone too, so its tasks are dropped")
        #expect(!ids.isEmpty)
        // The actor journals what expiry dropped (a durable broker forgets those tasks).
        #expect(
            dropped.contains {
                if case .coordinatorExpired(self.coordinator, let tasks) = $0 { Set(tasks) == Set(ids) } else { false }
            }
        )
        // When it speaks again it is told, once, to send its unfinished tasks again.
        let first = state.takeExpiredNotice(self.coordinator)
        let second = state.takeExpiredNotice(self.coordinator)
        let stranger = state.takeExpiredNotice(self.workerA)
        #expect(first && !second && !stranger)
    }

    @Test("the last coordinator found is forgotten when it leaves: the same id back is a new entry")
    func lastCoordinatorForgotten() {
        var state = BrokerState(heartbeat: Heartbeat(interval: .seconds(1), liveness: 3))
        let first = state.seenCoordinator(self.coordinator, now: self.t0)
        #expect(state.coordinator(self.coordinator) === first)
        #expect(state.coordinator(self.workerA) == nil, "an unknown id is not the last one found")
        #expect(state.coordinator(self.coordinator) === first)
        _ = state.coordinatorLost(self.coordinator)
        #expect(state.coordinator(self.coordinator) == nil, "a lost coordinator is not found through the cache")
        let again = state.seenCoordinator(self.coordinator, now: self.t0 + .seconds(1))
        #expect(again !== first)
        #expect(state.coordinator(self.coordinator) === again)
    }

    @Test("with a short heartbeat a coordinator still has 10 s: 3 of the broker's heartbeats are not its silence")
    func shortHeartbeatCoordinatorExpiry() {
        var state = BrokerState(heartbeat: Heartbeat(interval: .milliseconds(200), liveness: 3))
        _ = self.submit(&state, 3)
        // The coordinator heartbeats every second; the broker ticks every 200 ms.
        for step in 1...40 {
            let now = self.t0 + .milliseconds(200 * step)
            if step % 5 == 0 { state.coordinatorSeen(self.coordinator, now: now) }
            #expect(!state.tick(now: now).contains { if case .coordinatorExpired = $0 { true } else { false } })
        }
        #expect(state.tasks.count == 3)
    }

    @Test("a lost coordinator's running tasks are cancelled on their workers and their credit comes back")
    func coordinatorLoss() {
        var state = BrokerState()
        let ids = self.submit(&state, 2)
        _ = state.workerReady(self.workerA, capacity: 1, info: self.info("a"), now: self.t0)
        let actions = state.coordinatorLost(self.coordinator)
        #expect(actions == [.cancelOnWorker(worker: self.workerA, ids[0])])
        #expect(state.queueDepth == 0)
        let (disposition, _) = state.workerResult(
            self.workerA,
            taskID: ids[0],
            attempt: 1,
            status: .completed,
            now: self.t0
        )
        #expect(disposition == .stale)
        #expect(state.workers[self.workerA]?.credit == 1)
    }

    @Test("a draining worker gets no new tasks but keeps its leases")
    func draining() {
        var state = BrokerState()
        let ids = self.submit(&state, 3)
        _ = state.workerReady(self.workerA, capacity: 2, info: self.info("a"), now: self.t0)
        _ = state.workerDraining(self.workerA)
        let (disposition, actions) = state.workerResult(
            self.workerA,
            taskID: ids[0],
            attempt: 1,
            status: .completed,
            now: self.t0
        )
        #expect(disposition == .forward(coordinator: self.coordinator))
        #expect(self.dispatched(actions).isEmpty)
        #expect(state.queueDepth == 1)
    }

    @Test("resubmitting a held task is accepted once; another coordinator's id is rejected; the queue has a limit")
    func submitRules() {
        var state = BrokerState(maxQueued: 2)
        let id = TaskID.random()
        let envelope = TaskEnvelope(kind: "sector")
        _ = state.submit(id, attempt: 1, envelope: envelope, input: [], from: self.coordinator, now: self.t0)
        let again = state.submit(id, attempt: 1, envelope: envelope, input: [], from: self.coordinator, now: self.t0)
        #expect(again == [.accepted(coordinator: self.coordinator, id, attempt: 1, requeued: false)])
        #expect(state.queueDepth == 1)
        let other = PeerID(Array("c-2".utf8))
        guard
            case .rejected(_, _, .duplicateID, _) = state.submit(
                id,
                attempt: 1,
                envelope: envelope,
                input: [],
                from: other,
                now: self.t0
            ).first
        else {
            Issue.record("expected a duplicate-id rejection")
            return
        }
        _ = self.submit(&state, 1)
        guard case .rejected(_, _, .queueFull, _) = self.submitActions(&state).first else {
            Issue.record("expected queue full")
            return
        }
    }

    func submitActions(_ state: inout BrokerState) -> [BrokerState.Action] {
        state.submit(
            TaskID.random(),
            attempt: 1,
            envelope: TaskEnvelope(kind: "sector"),
            input: [],
            from: self.coordinator,
            now: self.t0
        )
    }

    @Test("cancelling a queued task answers at once; a running one is cancelled on its worker")
    func cancel() {
        var state = BrokerState()
        let ids = self.submit(&state, 2)
        _ = state.workerReady(self.workerA, capacity: 1, info: self.info("a"), now: self.t0)
        #expect(state.cancel(ids[0], from: self.coordinator) == [.cancelOnWorker(worker: self.workerA, ids[0])])
        #expect(
            state.cancel(ids[1], from: self.coordinator) == [
                .resultForCoordinator(
                    coordinator: self.coordinator,
                    ids[1],
                    attempt: 1,
                    .cancelled,
                    reason: "cancelled"
                )
            ]
        )
        #expect(state.queueDepth == 0)
    }

    @Test("an expired lease is queued again; the stuck slot stays used until its late result, which is stale")
    func leaseExpiry() {
        var state = BrokerState()
        let ids = self.submit(&state, 2, maxAttempts: 2)
        _ = state.workerReady(self.workerA, capacity: 1, info: self.info("a"), now: self.t0)
        // ids[0] is leased to A (capacity 1); ids[1] waits.
        let expired = state.expireLease(ids[0], worker: self.workerA, attempt: 1)
        #expect(expired == [.accepted(coordinator: self.coordinator, ids[0], attempt: 2, requeued: true)])
        #expect(state.figures.leasesExpired == 1)
        // A's one slot is still busy with the stuck scan: nothing new goes to it.
        #expect(state.workers[self.workerA]?.credit == 0)
        #expect(state.queueDepth == 2)
        // A second worker takes the requeued task first.
        let b = self.dispatched(state.workerReady(self.workerB, capacity: 1, info: self.info("b"), now: self.t0))
        #expect(b.map(\.1) == [ids[0]])
        // The late result of attempt 1 on A is stale, frees A's slot, and A gets the next task.
        let (late, actions) = state.workerResult(
            self.workerA,
            taskID: ids[0],
            attempt: 1,
            status: .completed,
            now: self.t0
        )
        #expect(late == .stale)
        #expect(self.dispatched(actions).map(\.1) == [ids[1]])
        // Expiring a lease that is not current does nothing.
        #expect(state.expireLease(ids[0], worker: self.workerA, attempt: 1).isEmpty)
        // On its last attempt an expired lease is failed to the coordinator as timed out.
        let last = state.expireLease(ids[0], worker: self.workerB, attempt: 2)
        guard case .resultForCoordinator(_, ids[0], 2, .timedOut, _) = last.first else {
            Issue.record("expected a timed-out result, got \(last)")
            return
        }
        #expect(state.tasks[ids[0]] == nil)
    }

    @Test("the task table: insert, update, remove, slots reused, and everything released when empty")
    func taskTable() throws {
        // The queue time fills padding: an entry is no bigger for it. The input is a `TaskBytes` (24
        // bytes: up to 22 held in place; it was an 8-byte array reference to a heap block of 64
        // bytes for a sector task's 20), so an entry was 88 + 16 bytes. Its coordinator's and
        // worker's ids are now held inline (17-byte `PeerID`s, as two words each, with their form
        // bytes in the envelope's tail padding, not 8-byte array references): 120.
        #expect(MemoryLayout<BrokerState.TaskEntry?>.stride == 120, "\(MemoryLayout<BrokerState.TaskEntry?>.stride)")
        #expect(MemoryLayout<TaskBytes>.size == 24)
        var table = TaskTable()
        func entry(_ low: UInt64, attempt: UInt32 = 1) -> BrokerState.TaskEntry {
            BrokerState.TaskEntry(
                id: TaskID(high: 0, low: low),
                coordinator: PeerID(Array("c".utf8)),
                envelope: TaskEnvelope(kind: "k"),
                input: [],
                attempt: attempt,
                queuedAt: 0,
                worker: nil,
                ticket: low
            )
        }
        let ids = (1...5).map { TaskID(high: 0, low: UInt64($0)) }
        for (index, id) in ids.enumerated() { table[id] = entry(UInt64(index + 1)) }
        #expect(table.count == 5 && table[ids[2]]?.ticket == 3)
        table[ids[2]]!.attempt = 4
        #expect(table[ids[2]]?.attempt == 4, "an update in place")
        #expect(table[ids[1]]?.ticket == 2)
        // Removed in place: what its end changes elsewhere comes back (its coordinator, and its kind
        // while queued).
        let removed = table.remove(ids[1])
        #expect(removed?.coordinator == PeerID(Array("c".utf8)) && removed?.queuedKind == "k")
        #expect(table.remove(ids[1]) == nil)
        #expect(table[ids[1]] == nil && table.count == 4)
        table[TaskID(high: 0, low: 9)] = entry(9)
        #expect(table.count == 5 && table[TaskID(high: 0, low: 9)]?.ticket == 9, "a freed slot is reused")
        // Visited in place (through the slab's buffer): the live entry, none for a freed slot or an
        // unknown id.
        var visited: [UInt64] = []
        #expect(table.visitEntry(ids[2]) { visited.append($0.pointee.ticket + UInt64($0.pointee.attempt)) })
        #expect(
            !table.visitEntry(ids[1]) { _ in visited.append(0) }
                && !table.visitEntry(TaskID(high: 1, low: 1)) { _ in visited.append(0) }
        )
        #expect(visited == [7])
        // Leased by its slot only under its live ticket, and only while queued; it says which task.
        let slot = try #require(table.slot(of: ids[3]))
        #expect(table.leaseIfQueued(slot: slot, ticket: 99, to: PeerID(Array("w".utf8))) == nil)
        #expect(table.queuedAt(slot: slot, ticket: 4) == 0)
        let lease = table.leaseIfQueued(slot: slot, ticket: 4, to: PeerID(Array("w".utf8)))
        #expect(lease?.0 == ids[3] && lease?.1 == 0)
        #expect(table[ids[3]]?.worker == PeerID(Array("w".utf8)))
        #expect(table.leaseIfQueued(slot: slot, ticket: 4, to: PeerID(Array("x".utf8))) == nil, "already leased")
        #expect(table.queuedAt(slot: slot, ticket: 4) == nil, "leased, not queued")
        // A queue item of a task that ended names a slot that another task took: its ticket does
        // not match that one's. Nor does a slot past the end, or a vacant one.
        let freed = try #require(table.slot(of: ids[4]))
        table[ids[4]] = nil
        #expect(table.queuedAt(slot: freed, ticket: 5) == nil, "vacant")
        let reused = table.add(entry(10))
        #expect(reused == freed && table.queuedAt(slot: freed, ticket: 5) == nil)
        #expect(table.queuedAt(slot: reused, ticket: 10) == 0)
        #expect(table.leaseIfQueued(slot: 1_000, ticket: 10, to: PeerID(Array("w".utf8))) == nil)
        table[TaskID(high: 0, low: 10)] = nil
        table[ids[4]] = entry(5)
        var seen: [UInt64] = []
        table.forEach { seen.append($0.ticket) }
        #expect(seen.sorted() == [1, 3, 4, 5, 9] && table.values.count == 5)
        // A leased task's end says no kind: it was not queued.
        let leased = table.remove(ids[3])
        #expect(leased != nil && leased?.queuedKind == nil)
        table[ids[3]] = entry(4)
        for id in ids + [TaskID(high: 0, low: 9)] { table[id] = nil }
        #expect(table.isEmpty && table.values.isEmpty)
        table[ids[0]] = entry(1)
        #expect(table.count == 1 && table[ids[0]]?.ticket == 1, "usable again after emptying")
    }

    @Test("at equal priority coordinators take turns: 10 tasks behind 10,000 of another go within a few credit cycles")
    func fairDispatch() {
        var state = BrokerState()
        let other = PeerID(Array("c-2".utf8))
        _ = self.submit(&state, 10_000, from: self.coordinator)
        let small = Set(self.submit(&state, 10, from: other))
        var leased = self.dispatched(state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0))
        var order: [TaskID] = leased.map(\.1)
        // Each credit cycle: the worker returns its 4 results, and 4 more are dispatched.
        while !small.isSubset(of: Set(order)), order.count < 100 {
            var next: [(PeerID, TaskID)] = []
            for (_, id) in leased {
                next += self.dispatched(
                    state.workerResult(self.workerA, taskID: id, attempt: 1, status: .completed, now: self.t0).1
                )
            }
            leased = next
            order += next.map(\.1)
        }
        // Both jobs were queued before the worker came; turns alternate from the first dispatch, so the
        // small job's 10 tasks are among the first 20 (a single FIFO would put them after 10,000).
        let positions = order.enumerated().filter { small.contains($0.element) }.map(\.offset)
        #expect(positions.count == 10 && positions.max()! < 20, "small job dispatched at \(positions)")
    }

    @Test("a coordinator past --max-queued-per-coordinator is REJECTED with the reason; others are not")
    func perCoordinatorLimit() {
        var state = BrokerState()
        state.maxPerCoordinator = 3
        let other = PeerID(Array("c-2".utf8))
        _ = self.submit(&state, 3)
        let id = TaskID.random()
        let actions = self.submitOne(&state, id)
        guard case .rejected(_, id, .queueFull, let text) = actions.first else {
            Issue.record("not rejected: \(actions)")
            return
        }
        #expect(text.contains("its limit (--max-queued-per-coordinator)"))
        #expect(self.submit(&state, 3, from: other).count == 3 && state.queueDepth == 6)
    }

    @Test("regression (fuzzing): a tick that loses two workers requeues their tasks once, to neither of them")
    func tickLosesWorkersBeforeDispatching() {
        var state = BrokerState()
        _ = self.submit(&state, 4, from: self.coordinator)
        // A holds 2 (its capacity); B holds 2 and has 2 slots free.
        _ = state.workerReady(self.workerA, capacity: 2, info: self.info("a"), now: self.t0)
        _ = state.workerReady(self.workerB, capacity: 4, info: self.info("b"), now: self.t0)
        #expect(state.leasedCount == 4)
        let later = self.t0 + state.heartbeat.expiry + .milliseconds(1)
        _ = state.coordinatorSeen(self.coordinator, now: later)
        // Both are silent: A's tasks must not go to B, which this same tick loses too.
        let actions = state.tick(now: later)
        #expect(self.dispatched(actions).isEmpty, "\(actions)")
        #expect(
            state.tasks.values.allSatisfy { $0.attempt == 2 && $0.worker == nil },
            "each lost lease costs one attempt"
        )
        let workerC = PeerID(Array("w-c".utf8))
        #expect(self.dispatched(state.workerReady(workerC, capacity: 8, info: self.info("c"), now: later)).count == 4)
    }

    @Test(
        "regression (fuzzing): an older attempt's RESULT from the worker holding the live attempt is stale and keeps the lease"
    )
    func staleAttemptKeepsLease() {
        var state = BrokerState()
        let id = TaskID.random()
        _ = self.submitOne(&state, id, attempt: 2)
        _ = state.workerReady(self.workerA, capacity: 1, info: self.info("a"), now: self.t0)
        #expect(state.tasks[id]?.worker == self.workerA)
        // The worker ran attempt 1 before it was lost and re-registered; that result comes in late.
        let (stale, _) = state.workerResult(self.workerA, taskID: id, attempt: 1, status: .completed, now: self.t0)
        #expect(stale == .stale)
        #expect(state.workers[self.workerA]?.leases.contains(id) == true, "the live lease stays")
        let (live, _) = state.workerResult(self.workerA, taskID: id, attempt: 2, status: .completed, now: self.t0)
        #expect(live == .forward(coordinator: self.coordinator), "attempt 2's result reaches its coordinator")
        #expect(state.tasks[id] == nil)
    }

    @Test(
        "regression (fuzzing): a SUBMIT whose attempt is 0 or past its max attempts is rejected, not queued to overflow later"
    )
    func attemptOutOfRange() {
        var state = BrokerState()
        _ = state.workerReady(self.workerA, capacity: 4, info: self.info("a"), now: self.t0)
        for attempt: UInt32 in [0, 4, .max] {
            let id = TaskID.random()
            let actions = self.submitOne(&state, id, attempt: attempt, maxAttempts: 3)
            guard case .rejected(_, id, .invalid, let text) = actions.first else {
                Issue.record("attempt \(attempt) not rejected: \(actions)")
                continue
            }
            #expect(text.contains("attempt \(attempt) of a task with 3 attempts"))
        }
        #expect(state.tasks.isEmpty)
        // Its last attempt lost with its worker fails to the coordinator instead of overflowing.
        let id = TaskID.random()
        _ = self.submitOne(&state, id, attempt: 3, maxAttempts: 3)
        let actions = state.workerLost(self.workerA, reason: "test")
        #expect(actions.contains { if case .resultForCoordinator(_, id, 3, .failed, _) = $0 { true } else { false } })
    }

    @Test(
        "regression (fuzzing): a task submitted again after its coordinator was lost is not confused with its abandoned run"
    )
    func abandonedRunOfTheSameTask() {
        for cancelledFirst in [true, false] {
            var state = BrokerState()
            let id = TaskID.random()
            _ = state.workerReady(self.workerA, capacity: 2, info: self.info("a"), now: self.t0)
            _ = self.submitOne(&state, id)
            // The broker forgets the coordinator (silence) and cancels its run; it comes back and sends
            // the same task again, which goes to the same worker while the first run still holds a slot.
            #expect(state.coordinatorLost(self.coordinator) == [.cancelOnWorker(worker: self.workerA, id)])
            let again = self.submitOne(&state, id)
            #expect(self.dispatched(again).map(\.0) == [self.workerA])
            #expect(state.workers[self.workerA]?.credit == 0, "the abandoned run still holds its slot")
            let results: [ResultStatus] = cancelledFirst ? [.cancelled, .completed] : [.completed, .cancelled]
            var forwarded = 0
            for status in results {
                let (disposition, _) = state.workerResult(
                    self.workerA,
                    taskID: id,
                    attempt: 1,
                    status: status,
                    now: self.t0
                )
                if case .forward = disposition { forwarded += 1 }
                #expect(
                    disposition == (status == .cancelled ? .stale : .forward(coordinator: self.coordinator)),
                    "\(status)"
                )
            }
            #expect(forwarded == 1 && state.tasks[id] == nil)
            #expect(state.workers[self.workerA]?.credit == 2, "both slots are free again")
        }
    }
}

// Figures by kind: the queue's depth and oldest task, the queue-wait and run-time histograms.
extension BrokerStateTests {
    func submit(_ state: inout BrokerState, kind: String, from coordinator: PeerID, at time: Duration) -> TaskID {
        let id = TaskID.random()
        _ = state.submit(
            id,
            attempt: 1,
            envelope: TaskEnvelope(kind: kind),
            input: [],
            from: coordinator,
            now: self.t0 + time
        )
        return id
    }

    @Test("depth and the oldest queued task's age by kind; the wait and run time as histograms")
    func kindFigures() {
        var state = BrokerState()
        let first = self.submit(&state, kind: "sector", from: self.coordinator, at: .zero)
        _ = self.submit(&state, kind: "sector", from: PeerID(Array("c-2".utf8)), at: .seconds(2))
        let cancelled = self.submit(&state, kind: "exec", from: self.coordinator, at: .seconds(1))
        _ = self.submit(&state, kind: "exec", from: self.coordinator, at: .seconds(3))
        var figures = state.kindFigures(now: self.t0 + .seconds(5))
        #expect(figures["sector"]?.queued == 2 && figures["sector"]?.oldestQueuedSeconds == 5)
        #expect(figures["exec"]?.queued == 2 && figures["exec"]?.oldestQueuedSeconds == 4)
        // A cancelled queued task leaves the queue at once (its item is removed lazily).
        _ = state.cancel(cancelled, from: self.coordinator)
        figures = state.kindFigures(now: self.t0 + .seconds(5))
        #expect(figures["exec"]?.queued == 1 && figures["exec"]?.oldestQueuedSeconds == 2)
        #expect(state.depthByKind == ["sector": 2, "exec": 1])
        // A worker comes at 6 s: the oldest sector waited 6 s, the other 4 s.
        let info = ReadyInfo(name: "a", kinds: ["sector"], heartbeatMilliseconds: 1000, version: "test")
        _ = state.workerReady(self.workerA, capacity: 4, info: info, now: self.t0 + .seconds(6))
        figures = state.kindFigures(now: self.t0 + .seconds(6))
        #expect(figures["sector"]?.queued == 0 && figures["sector"]?.oldestQueuedSeconds == 0)
        let wait = figures["sector"]?.queueWait
        #expect(wait?.count == 2 && wait?.sumSeconds == 10)
        #expect(wait?.quantile(0.5) == 5 && wait?.quantile(1) == 10)
        // Results: the worker's own time (completed and failed counted, cancelled not).
        _ = state.workerResult(
            self.workerA,
            taskID: first,
            attempt: 1,
            status: .completed,
            runMicroseconds: 300,
            now: self.t0 + .seconds(7)
        )
        let run = state.kindFigures(now: self.t0 + .seconds(7))["sector"]?.runTime
        #expect(run?.count == 1 && run?.buckets.first == 1 && run?.sumMicroseconds == 300)
        #expect(state.depthByKind == ["exec": 1])
    }

    @Test("histogram buckets: at or under each bound, then +Inf; cumulative for Prometheus")
    func histogram() {
        var histogram = LatencyHistogram()
        for micros: UInt64 in [0, 500, 501, 1_000_000, 4_000_000_000] { histogram.record(microseconds: micros) }
        #expect(histogram.buckets[0] == 2 && histogram.buckets[1] == 1)
        #expect(histogram.buckets[LatencyHistogram.bounds.firstIndex(of: 1)!] == 1)
        #expect(histogram.buckets.last == 1)
        #expect(histogram.cumulative.last == 5 && histogram.count == 5)
        #expect(histogram.quantile(0.99) == .infinity && LatencyHistogram().quantile(0.5) == nil)
        // The buckets are found by constants: each bound must be the table's, in microseconds.
        for (index, bound) in LatencyHistogram.bounds.enumerated() {
            let micros = UInt64((bound * 1_000_000).rounded())
            #expect(LatencyHistogram.bucket(microseconds: micros) == index, "\(bound) s")
            #expect(LatencyHistogram.bucket(microseconds: micros + 1) == index + 1, "just over \(bound) s")
        }
        #expect(LatencyHistogram.bucket(microseconds: 0) == 0)
        #expect(LatencyHistogram.bucket(microseconds: .max) == LatencyHistogram.bounds.count)
    }

    @Test("an instant's bytes: the same instant is the same, another or none never is")
    func instantBytes() {
        let now = ContinuousClock.now
        let copy = now
        #expect(InstantBytes(now).isSame(as: InstantBytes(copy)))
        #expect(!InstantBytes(now).isSame(as: InstantBytes(now + .nanoseconds(1))))
        #expect(!InstantBytes(now).isSame(as: .none) && !InstantBytes.none.isSame(as: .none))
        // The clock moves with every new instant, and only then.
        var state = BrokerState()
        state.advance(to: self.t0)
        state.advance(to: self.t0 + .milliseconds(1500))
        #expect(state.clock == 1500)
        state.advance(to: self.t0 + .milliseconds(1500))
        #expect(state.clock == 1500 && state.clockOrigin == self.t0)
        state.advance(to: self.t0 + .seconds(3))
        #expect(state.clock == 3000 && state.milliseconds(at: self.t0 + .seconds(4)) == 4000)
    }
}
