import Testing

@testable import SkyNetCore

@Suite("Lending to workers of short tasks")
struct ShortTaskPrefetchTests {
    let t0 = ContinuousClock.now
    let coordinator = PeerID(Array("c-1".utf8))
    let worker = PeerID(Array("w-a".utf8))

    @Test("the rule: half the capacity (rounded up) once eight runs average under 5 ms, none above 10 ms")
    func rule() {
        var prefetch = ShortTaskPrefetch()
        #expect(prefetch.extra(capacity: 16) == 0)
        for _ in 0..<7 { prefetch.ran(microseconds: 1_000) }
        #expect(!prefetch.lending, "not before eight results")
        prefetch.ran(microseconds: 1_000)
        #expect(prefetch.lending && prefetch.average == 1_000)
        #expect(prefetch.extra(capacity: 16) == 8)
        #expect(prefetch.extra(capacity: 4) == 2)
        #expect(prefetch.extra(capacity: 1) == 1)
        #expect(prefetch.extra(capacity: 64) == 32)
        #expect(prefetch.extra(capacity: 5) == 3)
        // Between the two thresholds it keeps lending: one 40 ms run moves the average to 5.9 ms.
        prefetch.ran(microseconds: 40_000)
        #expect(prefetch.lending && prefetch.average == 5_875)
        // A second: 10.1 ms, and it stops.
        prefetch.ran(microseconds: 40_000)
        #expect(!prefetch.lending && prefetch.extra(capacity: 16) == 0)
        // Between the thresholds again on the way down: it stays off until the average is under 5 ms.
        prefetch.ran(microseconds: 0)
        #expect(!prefetch.lending && prefetch.average > ShortTaskPrefetch.engageBelow)
        for _ in 0..<6 { prefetch.ran(microseconds: 0) }
        #expect(prefetch.lending && prefetch.average < ShortTaskPrefetch.engageBelow)
    }

    @Test("the rule never lends to a worker whose tasks are long, and survives the largest run time")
    func longTasks() {
        var prefetch = ShortTaskPrefetch()
        for _ in 0..<100 { prefetch.ran(microseconds: 50_000) }
        #expect(!prefetch.lending)
        prefetch.ran(microseconds: .max)
        #expect(!prefetch.lending && prefetch.average > 50_000)
    }

    /// A worker of `capacity` with `queued` tasks waiting; returns the ids dispatched.
    func cluster(_ state: inout BrokerState, capacity: Int, queued: Int, lends: Bool = true) -> [TaskID] {
        state.prefetchesShortTasks = lends
        for _ in 0..<queued {
            _ = state.submit(
                TaskID.random(),
                attempt: 1,
                envelope: TaskEnvelope(kind: "sector", maxAttempts: 3),
                input: [],
                from: self.coordinator,
                now: self.t0
            )
        }
        let info = ReadyInfo(name: "a", kinds: ["sector"], heartbeatMilliseconds: 1000, version: "test")
        let actions = state.workerReady(self.worker, capacity: capacity, info: info, now: self.t0)
        return actions.compactMap { if case .dispatch(_, let id, _) = $0 { id } else { nil } }
    }

    /// Returns the result of the oldest task leased to the worker, run for `microseconds`.
    func finishOne(_ state: inout BrokerState, _ running: inout [TaskID], microseconds: UInt32) {
        let id = running.removeFirst()
        let (_, actions) = state.workerResult(
            self.worker,
            taskID: id,
            attempt: 1,
            status: .completed,
            runMicroseconds: microseconds,
            now: self.t0
        )
        running += actions.compactMap { if case .dispatch(_, let id, _) = $0 { id } else { nil } }
    }

    @Test("the broker lends a worker of short tasks half as many again, and takes no more back than it lent")
    func dispatchLends() {
        var state = BrokerState()
        var running = self.cluster(&state, capacity: 4, queued: 100)
        #expect(running.count == 4)
        for _ in 0..<7 { self.finishOne(&state, &running, microseconds: 800) }
        #expect(running.count == 4 && state.workers[self.worker]?.leases.count == 4)
        // The eighth short result: its replacement and two lent tasks.
        self.finishOne(&state, &running, microseconds: 800)
        #expect(running.count == 6 && state.workers[self.worker]?.leases.count == 6)
        #expect(state.workers[self.worker]?.load.limit == 6)
        // One long result keeps the loan (the average is 8.2 ms); the second ends it, and what is out
        // drains back to the capacity: no slot is refilled until the worker is under it.
        self.finishOne(&state, &running, microseconds: 60_000)
        #expect(running.count == 6)
        self.finishOne(&state, &running, microseconds: 60_000)
        #expect(state.workers[self.worker]?.load.limit == 4)
        #expect(running.count == 5)
        self.finishOne(&state, &running, microseconds: 60_000)
        #expect(running.count == 4)
        self.finishOne(&state, &running, microseconds: 60_000)
        #expect(running.count == 4, "at its capacity: each result brings one task")
    }

    @Test("with lending off (skynet broker --prefetch off) a worker never has more than its capacity")
    func dispatchOff() {
        var state = BrokerState()
        var running = self.cluster(&state, capacity: 4, queued: 100, lends: false)
        for _ in 0..<40 { self.finishOne(&state, &running, microseconds: 100) }
        #expect(running.count == 4 && state.workers[self.worker]?.load.limit == 4)
    }

    @Test("a worker left with no task starts over: the next job is lent to only after eight short results")
    func idleStartsOver() {
        var state = BrokerState()
        var running = self.cluster(&state, capacity: 4, queued: 12)
        for _ in 0..<8 { self.finishOne(&state, &running, microseconds: 100) }
        #expect(state.workers[self.worker]?.load.limit == 6)
        while !running.isEmpty { self.finishOne(&state, &running, microseconds: 100) }
        #expect(state.workers[self.worker]?.load.limit == 4, "idle: lending starts over")
        var prefetch = ShortTaskPrefetch()
        prefetch.idle()
        #expect(prefetch == ShortTaskPrefetch())
    }

    @Test("a worker whose last tasks end as cancelled (their coordinator lost) starts over too")
    func idleAfterCancel() {
        var state = BrokerState()
        var running = self.cluster(&state, capacity: 4, queued: 100)
        for _ in 0..<8 { self.finishOne(&state, &running, microseconds: 100) }
        #expect(state.workers[self.worker]?.load.limit == 6)
        _ = state.coordinatorLost(self.coordinator)
        // The abandoned scans hold their slots until the worker answers each CANCEL.
        #expect(state.workers[self.worker]?.load.limit == 6)
        for id in running {
            _ = state.workerResult(self.worker, taskID: id, attempt: 1, status: .cancelled, now: self.t0)
        }
        #expect(state.workers[self.worker]?.stuck.isEmpty == true)
        #expect(state.workers[self.worker]?.load.limit == 4, "no task left: lending starts over")
    }

    @Test("a draining worker is lent nothing, however short its tasks")
    func drainingLendsNothing() {
        var state = BrokerState()
        var running = self.cluster(&state, capacity: 4, queued: 100)
        for _ in 0..<10 { self.finishOne(&state, &running, microseconds: 100) }
        #expect(running.count == 6)
        _ = state.workerDraining(self.worker)
        #expect(state.workers[self.worker]?.credit == 0)
        self.finishOne(&state, &running, microseconds: 100)
        #expect(running.count == 5, "a RESULT from a draining worker brings no new task")
    }

    @Test(
        "tiny tasks (under 50 µs on average) are lent 400 µs of work per slot (32 at most, 4,096 in all), until they average over 100 µs"
    )
    func tinyRule() {
        var prefetch = ShortTaskPrefetch()
        for _ in 0..<8 { prefetch.ran(microseconds: 2) }
        #expect(prefetch.lending && prefetch.tiny && prefetch.tinyPerSlot == 32)
        #expect(prefetch.extra(capacity: 64) == 2_048 && prefetch.extra(capacity: 4) == 128)
        #expect(prefetch.extra(capacity: 4_096) == ShortTaskPrefetch.mostLent, "at most four full BATCHes")
        // Between the thresholds it stays tiny: 2 → 89 µs average after one 700 µs result, and is
        // lent what runs in 400 µs at that average: 4 per slot.
        prefetch.ran(microseconds: 700)
        #expect(prefetch.tiny && prefetch.average == 89)
        #expect(prefetch.tinyPerSlot == 4 && prefetch.extra(capacity: 64) == 256)
        prefetch.ran(microseconds: 700)
        #expect(!prefetch.tiny && prefetch.lending && prefetch.extra(capacity: 64) == 32)
        // Back under 100 but not under 50: still half.
        for _ in 0..<3 { prefetch.ran(microseconds: 0) }
        #expect(!prefetch.tiny && prefetch.average > ShortTaskPrefetch.tinyBelow)
        for _ in 0..<5 { prefetch.ran(microseconds: 0) }
        #expect(!prefetch.tiny && prefetch.average == 55, "under 100 µs is not enough")
        prefetch.ran(microseconds: 0)
        #expect(prefetch.tiny && prefetch.average == 48)
        #expect(prefetch.tinyPerSlot == 8 && prefetch.extra(capacity: 10) == 80, "400 µs / 48 µs: 8 a slot")
        // Not lending at all (one long task run after another): not tiny either.
        for _ in 0..<20 { prefetch.ran(microseconds: 50_000) }
        #expect(!prefetch.lending && !prefetch.tiny && prefetch.extra(capacity: 64) == 0)
        // Tiny results before the warm-up lend nothing yet.
        var fresh = ShortTaskPrefetch()
        for _ in 0..<7 { fresh.ran(microseconds: 1) }
        #expect(!fresh.lending && !fresh.tiny && fresh.extra(capacity: 8) == 0)
    }

    @Test("the broker lends a worker of tiny tasks 32 a slot, and takes it back to half when they grow")
    func dispatchLendsTiny() {
        var state = BrokerState()
        var running = self.cluster(&state, capacity: 4, queued: 400)
        for _ in 0..<8 { self.finishOne(&state, &running, microseconds: 3) }
        #expect(running.count == 132 && state.workers[self.worker]?.load.limit == 132)
        #expect(state.workers[self.worker]?.leases.count == 132)
        // Longer tasks (1 ms): half lent again, and what is out drains back to it first.
        for _ in 0..<2 { self.finishOne(&state, &running, microseconds: 1_000) }
        #expect(state.workers[self.worker]?.load.limit == 6)
        #expect(running.count == 130, "no slot refilled while over the limit")
        while running.count > 6 { self.finishOne(&state, &running, microseconds: 1_000) }
        self.finishOne(&state, &running, microseconds: 1_000)
        #expect(running.count == 6, "at the limit: each result brings one task")
    }
}
