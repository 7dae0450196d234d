import SkyNetCore
import Synchronization
import ZeroMQ

/// A worker's slot loops (DESIGN.md §3, "Slot loops"): the scans that wait on the reactor (their
/// scanner never blocks a thread) run in at most `slots` long-lived tasks on the reactor, each taking
/// the next scan when it finishes one, rather than in a task of their own: a scan then costs no task,
/// no executor preference and no hop to report its result. The rules (who takes what, retiring a
/// cancelled loop) are ``SlotQueue``'s; this class keeps it behind a lock and runs the loops.
///
/// Every loop runs on the reactor thread (its task prefers the reactor as executor), as does the
/// worker: the lock is never contended, it is there because a loop is not isolated to the worker.
final class SlotLoops: Sendable {
    typealias Run = UInt64
    /// A scan a loop takes: its number and task.
    typealias Job = (run: Run, task: ScanTask)

    private let queue: Mutex<SlotQueue<ScanTask, UnsafeContinuation<Job?, Never>>>
    /// The loops' tasks by slot, to cancel the one that runs a cancelled scan.
    private let handles: Mutex<[Task<Void, Never>?]>
    private let system: ScanSystem
    private let reactor: Reactor
    /// Hands a finished scan's result to the worker, on the reactor thread.
    private let report: @Sendable (_ run: Run, _ result: consuming ScanResult) -> Void

    init(
        system: ScanSystem,
        reactor: Reactor,
        report: @escaping @Sendable (_ run: Run, _ result: consuming ScanResult) -> Void
    ) {
        self.system = system
        self.reactor = reactor
        self.report = report
        self.queue = Mutex(SlotQueue(limit: system.slots))
        self.handles = Mutex(Array(repeating: nil, count: system.slots))
    }

    /// Scans waiting for a loop.
    var waiting: Int { self.queue.withLock { $0.waiting } }

    /// Runs `task` in a loop, as scan `run`. False when the loops are closed (the worker stopped).
    func submit(_ task: consuming ScanTask, run: Run) -> Bool {
        switch self.queue.withLock({ $0.submit(task, run: run) }) {
        case .resume(let loop, let run, let task):
            loop.resume(returning: (run, task))
        case .start(let slot):
            self.start(slot)
        case .queued:
            break
        case .closed:
            return false
        }
        return true
    }

    /// Cancels scan `run`: a waiting one is taken out and returned (it never runs); a running one's
    /// loop is cancelled, reports it, and retires.
    func cancel(_ run: Run) -> ScanTask? {
        switch self.queue.withLock({ $0.cancel(run) }) {
        case .waiting(let task):
            return task
        case .running(let slot):
            self.handles.withLock { $0[slot] }?.cancel()
            return nil
        case .none:
            return nil
        }
    }

    /// Stops: parked loops end, running ones end after their scan; returns the scans that were
    /// waiting (they never run).
    func close() -> [ScanTask] {
        let (parked, waiting) = self.queue.withLock { $0.close() }
        for loop in parked { loop.resume(returning: nil) }
        return waiting
    }

    /// Starts the loop of `slot`.
    private func start(_ slot: Int) {
        let reactor = self.reactor
        let handle = Task(executorPreference: reactor) { [self] in
            await ScanContext.$reactor.withValue(reactor) { await self.loop(slot) }
        }
        self.handles.withLock { $0[slot] = handle }
    }

    /// One loop: scans until cancelled (after the scan the cancel was for) or closed.
    private nonisolated(nonsending) func loop(_ slot: Int) async {
        while let (run, task) = await self.next(slot) {
            let result = await self.system.run(task)
            self.report(run, result)
            if Task.isCancelled { break }
        }
        let successor = self.queue.withLock { $0.retired(loop: slot) }
        self.handles.withLock { $0[slot] = nil }
        if let successor { self.start(successor) }
    }

    /// The next scan for the loop of `slot`, waiting for one; nil when it retires.
    private nonisolated(nonsending) func next(_ slot: Int) async -> Job? {
        switch self.queue.withLock({ $0.next(loop: slot) }) {
        case .run(let run, let task): return (run, task)
        case .retire: return nil
        case .wait: break
        }
        // Unsafe (no check against a second resume, no allocation): a parked loop's continuation is
        // kept in one place only, its loop's `SlotQueue` entry, and leaves it exactly once, handed
        // back by `submit` (.resume) or `close` as the entry changes, under the lock; or it is
        // resumed right here when `park` did not keep it. `SlotQueueTests` and the worker's wire
        // tests drive every one of those paths.
        return await withUnsafeContinuation { (continuation: UnsafeContinuation<Job?, Never>) in
            switch self.queue.withLock({ $0.park(loop: slot, continuation) }) {
            case .run(let run, let task): continuation.resume(returning: (run, task))
            case .retire: continuation.resume(returning: nil)
            case .wait: break
            }
        }
    }
}
