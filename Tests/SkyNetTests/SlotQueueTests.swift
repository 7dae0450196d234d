import Testing

@testable import SkyNetCore

/// The rules of a worker's slot loops: which loop runs which scan, and what a cancel reaches.
@Suite("Slot loops: the queue's rules")
struct SlotQueueTests {
    /// Items are strings, a parked loop's waiter its name.
    typealias Queue = SlotQueue<String, String>

    @Test("the first scans start loops up to the limit; more wait, first come first served")
    func startsUpToTheLimit() {
        var queue = Queue(limit: 2)
        guard case .start(loop: 0) = queue.submit("a", run: 1) else {
            Issue.record("no loop started")
            return
        }
        guard case .start(loop: 1) = queue.submit("b", run: 2) else {
            Issue.record("no second loop")
            return
        }
        guard case .queued = queue.submit("c", run: 3) else {
            Issue.record("a third loop")
            return
        }
        #expect(queue.waiting == 3)
        // Each loop takes the oldest scan.
        guard case .run(1, "a") = queue.next(loop: 0), case .run(2, "b") = queue.next(loop: 1) else {
            Issue.record("not in order")
            return
        }
        guard case .run(3, "c") = queue.next(loop: 1) else {
            Issue.record("c not run")
            return
        }
        #expect(queue.waiting == 0)
        guard case .wait = queue.next(loop: 0) else {
            Issue.record("loop 0 did not wait")
            return
        }
    }

    @Test("a parked loop is resumed with the next scan; a scan that came while it parked is taken at once")
    func parking() {
        var queue = Queue(limit: 1)
        _ = queue.submit("a", run: 1)
        _ = queue.next(loop: 0)
        guard case .wait = queue.park(loop: 0, "loop-0") else {
            Issue.record("not parked")
            return
        }
        guard case .resume("loop-0", 2, "b") = queue.submit("b", run: 2) else {
            Issue.record("the parked loop was not resumed")
            return
        }
        // While it runs b, c comes; it parks no more when it finishes: c is there.
        _ = queue.submit("c", run: 3)
        guard case .run(3, "c") = queue.park(loop: 0, "loop-0") else {
            Issue.record("c not taken")
            return
        }
    }

    @Test("cancelling a waiting scan takes it out: it never runs, and its loop goes on")
    func cancelWaiting() {
        var queue = Queue(limit: 1)
        _ = queue.submit("a", run: 1)
        _ = queue.next(loop: 0)
        _ = queue.submit("b", run: 2)
        _ = queue.submit("c", run: 3)
        guard case .waiting("b") = queue.cancel(2) else {
            Issue.record("b not found waiting")
            return
        }
        guard case .none = queue.cancel(2) else {
            Issue.record("b cancelled twice")
            return
        }
        guard case .run(3, "c") = queue.next(loop: 0) else {
            Issue.record("c not next")
            return
        }
    }

    @Test("cancelling a running scan retires its loop, so the cancel never reaches the next scan; a successor takes it")
    func cancelRunning() {
        var queue = Queue(limit: 2)
        _ = queue.submit("a", run: 1)
        _ = queue.submit("b", run: 2)
        _ = queue.next(loop: 0)
        _ = queue.next(loop: 1)
        _ = queue.submit("c", run: 3)
        guard case .running(loop: 0) = queue.cancel(1) else {
            Issue.record("a not found running")
            return
        }
        // The cancelled loop takes nothing more, though c waits.
        guard case .retire = queue.next(loop: 0) else {
            Issue.record("the cancelled loop went on")
            return
        }
        #expect(queue.waiting == 1)
        // Its successor, in the same place, takes c.
        #expect(queue.retired(loop: 0) == 0)
        guard case .run(3, "c") = queue.next(loop: 0) else {
            Issue.record("the successor did not take c")
            return
        }
        // A finished scan's number matches nothing.
        guard case .none = queue.cancel(1) else {
            Issue.record("a found again")
            return
        }
    }

    @Test("a retired loop with nothing waiting leaves its place free for a later scan")
    func retiredIdle() {
        var queue = Queue(limit: 1)
        _ = queue.submit("a", run: 1)
        _ = queue.next(loop: 0)
        _ = queue.cancel(1)
        guard case .retire = queue.next(loop: 0) else {
            Issue.record("not retired")
            return
        }
        #expect(queue.retired(loop: 0) == nil)
        guard case .start(loop: 0) = queue.submit("b", run: 2) else {
            Issue.record("no loop for b")
            return
        }
    }

    @Test("closing returns the parked loops and the waiting scans; nothing runs or starts after")
    func close() {
        var queue = Queue(limit: 3)
        _ = queue.submit("a", run: 1)
        _ = queue.submit("b", run: 2)
        _ = queue.next(loop: 0)
        _ = queue.next(loop: 1)
        _ = queue.park(loop: 1, "loop-1")
        _ = queue.submit("c", run: 3)  // to the parked loop
        _ = queue.park(loop: 1, "loop-1")  // nothing: parks again
        _ = queue.submit("d", run: 4)  // the parked loop
        _ = queue.submit("e", run: 5)  // a third loop starts
        let (parked, waiting) = queue.close()
        #expect(parked.isEmpty)
        #expect(waiting == ["e"])
        #expect(queue.isClosed)
        guard case .closed("f") = queue.submit("f", run: 6) else {
            Issue.record("f taken after close")
            return
        }
        guard case .retire = queue.next(loop: 0) else {
            Issue.record("loop 0 went on after close")
            return
        }
        #expect(queue.retired(loop: 0) == nil)

        var idle = Queue(limit: 2)
        _ = idle.submit("a", run: 1)
        _ = idle.next(loop: 0)
        _ = idle.park(loop: 0, "loop-0")
        let closed = idle.close()
        #expect(closed.parked == ["loop-0"] && closed.waiting.isEmpty)
    }
}
