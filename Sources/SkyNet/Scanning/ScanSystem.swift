import SkyNetCore
import DequeModule
import ZeroMQ
import Synchronization

/// An actor that runs ``TaskScanner``s in a fixed number of slots (the book's `ScanSystem`).
///
/// ``run(_:)`` waits for a free slot (first come, first served) and never runs more than ``slots``
/// scans at once; ``count`` is the number of tasks waiting or running, like the book's `count`.
/// Scans themselves run off the actor, on the global concurrent executor (or the caller's task
/// executor); ``runImmediately(_:)`` runs a scan that is done at once on the caller's thread.
public actor ScanSystem {
    /// The name results carry ("worker-a", "local").
    public nonisolated let name: String
    /// How many scans may run at once (default 4).
    public nonisolated let slots: Int
    private nonisolated let scanners: [String: any TaskScanner]
    /// The kinds of the same scanners when there are a few (nil with more), and the scanners in the
    /// same order (``fewScanners``): a kind compared with each (short strings compare as two words)
    /// costs less than hashing it, twice per task. Two arrays, not one of pairs: an element of
    /// `(String, any TaskScanner)` was copied whole, through the runtime's tuple witness (~140
    /// instructions), to compare its kind.
    private nonisolated let fewKinds: [String]?
    private nonisolated let fewScanners: [any TaskScanner]
    /// Scanners added after start (``register(_:)``: a coordinator's typed jobs), looked up only for
    /// kinds not in `scanners`.
    private nonisolated let added = Mutex<[String: any TaskScanner]>([:])

    /// A scan waiting for a slot. A class so that `release`'s optional is one pointer: an optional
    /// `CheckedContinuation` (a resilient type) was copied, tested and destroyed through the runtime's
    /// generic witnesses on every finish, about 300 instructions a task on a worker's reactor.
    private final class SlotWaiter: Sendable {
        let continuation: CheckedContinuation<Int, Never>
        init(_ continuation: CheckedContinuation<Int, Never>) { self.continuation = continuation }
    }

    private struct State {
        var freeSlots: [Int]
        var waiters: Deque<SlotWaiter> = []
        var count = 0
        var running = 0
        var peakRunning = 0
        var completedCount = 0
        var failedCount = 0

        /// A scan starts in a slot it took: returns how many run now, itself included.
        mutating func start() -> Int {
            self.running += 1
            self.peakRunning = max(self.peakRunning, self.running)
            return self.running
        }

        /// Gives `slot` back: to the longest waiter (returned, to resume outside the lock), else free.
        mutating func release(_ slot: Int) -> SlotWaiter? {
            if let next = self.waiters.popFirst() { return next }
            self.freeSlots.append(slot)
            return nil
        }

        mutating func count(_ outcome: ScanOutcome) {
            if case .completed = outcome { self.count(completed: true) } else { self.count(completed: false) }
        }

        mutating func count(completed: Bool) {
            if completed { self.completedCount += 1 } else { self.failedCount += 1 }
        }
    }

    /// The slots and counters, behind a lock so that ``runImmediately(_:)`` can take a slot from
    /// whichever thread calls it (a worker's reactor) without a hop onto this actor.
    private let state: Mutex<State>

    /// Tasks waiting for a slot or running.
    public var count: Int { self.state.withLock { $0.count } }
    /// Scans running now.
    public var running: Int { self.state.withLock { $0.running } }
    /// The most scans that ever ran at once.
    public var peakRunning: Int { self.state.withLock { $0.peakRunning } }
    /// Attempts finished, by outcome.
    public var completedCount: Int { self.state.withLock { $0.completedCount } }
    /// Scans that ended in a failure or a time-out.
    public var failedCount: Int { self.state.withLock { $0.failedCount } }
    /// Scans running now, attempts completed and attempts failed, read at once from any thread.
    public nonisolated var counts: (running: Int, completed: Int, failed: Int) {
        self.state.withLock { ($0.running, $0.completedCount, $0.failedCount) }
    }

    /// Creates a system.
    /// - Parameters:
    ///   - name: the name results carry.
    ///   - slots: how many scans may run at once; at least 1.
    ///   - scanners: the scanners by kind; later ones replace earlier ones of the same kind.
    public init(name: String, slots: Int = 4, scanners: [any TaskScanner]) {
        precondition(slots >= 1, "a ScanSystem needs at least one slot")
        self.name = name
        self.slots = slots
        self.scanners = Dictionary(scanners.map { ($0.kind, $0) }, uniquingKeysWith: { _, last in last })
        // In the order given (a kind given twice keeps its first place and its last scanner), not
        // the dictionary's, which changes from process to process: where the common kind fell
        // among the others (each kind before it a String comparison, twice a task) moved a
        // worker's cost of a no-op task by up to ~100 instructions from one run to the next.
        var kinds: [String] = []
        var few: [any TaskScanner] = []
        if self.scanners.count <= 8 {
            for scanner in scanners where !kinds.contains(scanner.kind) {
                guard let last = self.scanners[scanner.kind] else { continue }
                kinds.append(scanner.kind)
                few.append(last)
            }
        }
        self.fewKinds = self.scanners.count <= 8 ? kinds : nil
        self.fewScanners = few
        self.state = Mutex(State(freeSlots: Array((0..<slots).reversed())))
    }

    /// Whether the task's scanner says this scan never blocks a thread (see ``TaskScanner/neverBlocks(_:)``).
    public nonisolated func neverBlocks(_ task: ScanTask) -> Bool {
        self.scanner(task.kind)?.neverBlocksBytes(task.input) ?? true
    }

    /// The kinds this system can scan.
    public nonisolated var kinds: [String] {
        Set(self.scanners.keys).union(self.added.withLock { $0.keys }).sorted()
    }

    /// Adds a scanner for a kind this system has none for (a kind it has keeps its scanner).
    public nonisolated func register(_ scanner: any TaskScanner) {
        guard self.scanners[scanner.kind] == nil else { return }
        self.added.withLock { added in
            if added[scanner.kind] == nil { added[scanner.kind] = scanner }
        }
    }

    private nonisolated func scanner(_ kind: String) -> (any TaskScanner)? {
        if let kinds = self.fewKinds {
            for index in kinds.indices where kinds[index] == kind { return self.fewScanners[index] }
        } else if let scanner = self.scanners[kind] {
            return scanner
        }
        return self.added.withLock { $0[kind] }
    }

    /// Runs one attempt of `task` in a free slot and reports how it ended. Never throws: a scanner's
    /// error, a timeout, a missing scanner and cancellation all become the result's outcome.
    ///
    /// Not isolated to the actor: the slots and counters are behind their lock, so a scan runs where
    /// its caller runs (a worker's reactor, for a scanner that never blocks) with no hop onto the
    /// actor and back, which cost two executor switches per scan.
    public nonisolated(nonsending) func run(_ task: ScanTask) async -> ScanResult {
        self.state.withLock { $0.count += 1 }
        defer { self.state.withLock { $0.count -= 1 } }
        guard let scanner = self.scanner(task.kind) else {
            return ScanResult(
                id: task.id,
                attempt: task.attempt,
                outcome: .failed("no scanner for kind \"\(task.kind)\" on \(self.name)"),
                system: self.name
            )
        }
        let slot = await self.acquireSlot()
        let busy = self.state.withLock { $0.start() }
        defer { self.finish(slot) }
        // Check state again: we may have waited for the slot while the task was cancelled.
        if Task.isCancelled {
            return ScanResult(
                id: task.id,
                attempt: task.attempt,
                outcome: .cancelled,
                system: self.name,
                slot: slot,
                busy: busy
            )
        }
        let start = ContinuousClock.now
        let reference = ScanTask.Reference(id: task.id, attempt: task.attempt, system: self.name, slot: slot)
        let outcome = await ScanContext.$task.withValue(reference) { await Self.execute(scanner, task) }
        return self.ended(task, outcome, after: ContinuousClock.now - start, slot: slot, busy: busy)
    }

    /// Runs one attempt of `task` at once on the calling thread, when a slot is free, nobody waits for
    /// one, and its scanner answers without waiting (``TaskScanner/scanImmediately(_:)``); nil otherwise,
    /// and then ``run(_:)`` is the way. A scan that is done at once costs no task and no hop. The slot
    /// and the counters are kept as ``run(_:)`` keeps them, so the cap on concurrent scans holds
    /// across both.
    public nonisolated func runImmediately(_ task: ScanTask) -> ScanResult? {
        var result: ScanResult?
        task.input.withUnsafeBytes { input in
            _ = self.runImmediately(kind: task.kind, input: input, with: ()) { _, outcome, nanoseconds, slot, busy in
                let outcome: ScanOutcome =
                    switch outcome {
                    case .completed(let output): .completed(Array(output))
                    case .failed(let failure): failure
                    }
                let duration = Duration.nanoseconds(Int64(clamping: nanoseconds))
                result = self.result(of: task, outcome, after: duration, slot: slot, busy: busy)
            }
        }
        return result
    }

    /// How a scan done at once ended, as ``runImmediately(kind:input:_:)`` hands it over.
    package enum Immediate {
        /// The output, read in place: valid only during the call.
        case completed(UnsafeRawBufferPointer)
        case failed(ScanOutcome)
    }

    /// ``runImmediately(_:)`` for a worker's reactor, over a TASK's parts as they arrived: the input
    /// read in place, the outcome handed to `ended` with the scan's time, slot and the scans running
    /// (the output valid only during the call), so that a scanner that writes its output in place
    /// (the sector scanner) costs no allocation. Returns false when the scan cannot be done at once
    /// (then `ended` was not called, and nothing was counted).
    ///
    /// `context` is handed to `ended` as it is: what `ended` needs that is a class (a worker's
    /// connection) goes through it rather than into the closure's captures, which were retained and
    /// released for every scan (a weakly referenced object's through the runtime's slow path).
    package nonisolated func runImmediately<Context>(
        kind: String,
        input: UnsafeRawBufferPointer,
        with context: Context,
        _ ended: (Context, Immediate, _ nanoseconds: UInt64, _ slot: Int, _ busy: Int) -> Void
    ) -> Bool {
        guard let scanner = self.scanner(kind) else { return false }
        let taken = self.state.withLock { state -> (slot: Int, busy: Int)? in
            guard state.waiters.isEmpty, let slot = state.freeSlots.popLast() else { return nil }
            state.count += 1
            return (slot, state.start())
        }
        guard let (slot, busy) = taken else { return false }
        let stopwatch = Stopwatch()
        // How the scan ended, nil while it has not: counted as the slot is given back, under the
        // same lock (a lock of its own cost ~40 instructions a scan). Nothing `ended` does is seen
        // before then: a worker's RESULT is gathered, and leaves at the reactor's flush.
        var completed: Bool?
        defer { self.finish(slot, uncounted: true, completed: completed) }
        do {
            try scanner._scanImmediately(input) { output in
                // Once: a scanner that calls twice has its first output stand.
                guard completed == nil else { return }
                completed = true
                ended(context, .completed(output), stopwatch.elapsedNanoseconds, slot, busy)
            }
        } catch {
            // An error after the output (a scanner that should not) leaves the output standing.
            guard completed == nil else { return true }
            completed = false
            ended(context, .failed(Self.failure(error)), stopwatch.elapsedNanoseconds, slot, busy)
        }
        return completed != nil
    }

    /// Counts an attempt that ran in `slot` by its outcome and makes its result.
    private nonisolated func ended(
        _ task: ScanTask,
        _ outcome: ScanOutcome,
        after duration: Duration,
        slot: Int,
        busy: Int
    ) -> ScanResult {
        self.state.withLock { $0.count(outcome) }
        return self.result(of: task, outcome, after: duration, slot: slot, busy: busy)
    }

    /// The result of an attempt of `task` that ran `duration` in `slot`.
    private nonisolated func result(
        of task: ScanTask,
        _ outcome: ScanOutcome,
        after duration: Duration,
        slot: Int,
        busy: Int
    ) -> ScanResult {
        ScanResult(
            id: task.id,
            attempt: task.attempt,
            outcome: outcome,
            system: self.name,
            duration: duration,
            slot: slot,
            busy: busy
        )
    }

    /// Waits for a free slot, first come, first served.
    private nonisolated(nonsending) func acquireSlot() async -> Int {
        if let slot = self.state.withLock({ $0.freeSlots.popLast() }) { return slot }
        return await withCheckedContinuation { continuation in
            // A slot may have come free since the check above: take it rather than wait for the next.
            let slot = self.state.withLock { state -> Int? in
                if let slot = state.freeSlots.popLast() { return slot }
                state.waiters.append(SlotWaiter(continuation))
                return nil
            }
            if let slot { continuation.resume(returning: slot) }
        }
    }

    /// Ends a scan in `slot`: hands the slot straight to the next waiter, so a newcomer cannot overtake
    /// it. `uncounted`: the scan also leaves ``count`` (``runImmediately(_:)``; ``run(_:)`` keeps that
    /// count itself). `completed`: how a scan done at once ended, counted here (nil: not counted).
    private nonisolated func finish(_ slot: Int, uncounted: Bool = false, completed: Bool? = nil) {
        let next = self.state.withLock { state in
            state.running -= 1
            if uncounted { state.count -= 1 }
            if let completed { state.count(completed: completed) }
            return state.release(slot)
        }
        next?.continuation.resume(returning: slot)
    }

    /// Runs the scanner off the actor, with the task's timeout if it has one.
    private nonisolated(nonsending) static func execute(
        _ scanner: any TaskScanner,
        _ task: ScanTask
    ) async -> ScanOutcome {
        guard let timeout = task.timeout else {
            return await Self.scan(scanner, task.input)
        }
        return await withTaskGroup(of: ScanOutcome?.self) { group in
            group.addTask { await Self.scan(scanner, task.input) }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return Task.isCancelled ? nil : .timedOut
            }
            var outcome: ScanOutcome = .cancelled
            while let next = await group.next() {
                guard let next else { continue }
                outcome = next
                group.cancelAll()
                break
            }
            return outcome
        }
    }

    private nonisolated(nonsending) static func scan(_ scanner: any TaskScanner, _ input: [UInt8]) async -> ScanOutcome
    {
        do {
            return .completed(try await scanner.scanBytes(input))
        } catch is CancellationError {
            return .cancelled
        } catch {
            if Task.isCancelled { return .cancelled }
            return Self.failure(error)
        }
    }

    /// A scanner's error as an outcome: its description, and a ``ScannerError``'s detail.
    private nonisolated static func failure(_ error: any Error) -> ScanOutcome {
        if let error = error as? ScannerError { return .failed(error.message, detail: error.detail) }
        return .failed(String(describing: error))
    }
}
