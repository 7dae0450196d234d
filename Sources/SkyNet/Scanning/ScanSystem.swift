import DequeModule

/// An actor that runs ``Scanner``s in a fixed number of slots (the book's `ScanSystem`).
///
/// ``run(_:)`` waits for a free slot (first come, first served) and never runs more than ``slots``
/// scans at once; ``count`` is the number of tasks waiting or running, like the book's `count`.
/// Scans themselves run off the actor, on the global concurrent executor.
public actor ScanSystem {
    /// The name results carry ("worker-a", "local").
    public nonisolated let name: String
    /// How many scans may run at once (default 4).
    public nonisolated let slots: Int
    private let scanners: [String: any Scanner]

    private var freeSlots: [Int]
    private var waiters: Deque<CheckedContinuation<Int, Never>> = []
    /// Tasks waiting for a slot or running.
    public private(set) var count = 0
    /// Scans running now.
    public private(set) var running = 0
    /// The most scans that ever ran at once.
    public private(set) var peakRunning = 0
    /// Attempts finished, by outcome.
    public private(set) var completedCount = 0
    public private(set) var failedCount = 0

    /// Creates a system.
    /// - Parameters:
    ///   - name: the name results carry.
    ///   - slots: how many scans may run at once; at least 1.
    ///   - scanners: the scanners by kind; later ones replace earlier ones of the same kind.
    public init(name: String, slots: Int = 4, scanners: [any Scanner] = [SectorScanner()]) {
        precondition(slots >= 1, "a ScanSystem needs at least one slot")
        self.name = name
        self.slots = slots
        self.scanners = Dictionary(scanners.map { ($0.kind, $0) }, uniquingKeysWith: { _, last in last })
        self.freeSlots = Array((0..<slots).reversed())
    }

    /// The kinds this system can scan.
    /// Whether the task's scanner says this scan never blocks a thread (see ``Scanner/neverBlocks(_:)``).
    public nonisolated func neverBlocks(_ task: ScanTask) -> Bool {
        self.scanners[task.kind]?.neverBlocks(task.input) ?? true
    }

    public nonisolated var kinds: [String] {
        // `scanners` is a let of a Sendable dictionary; reading it needs no isolation.
        self.scanners.keys.sorted()
    }

    /// Runs one attempt of `task` in a free slot and reports how it ended. Never throws: a scanner's
    /// error, a timeout, a missing scanner and cancellation all become the result's outcome.
    public func run(_ task: ScanTask) async -> ScanResult {
        self.count += 1
        defer { self.count -= 1 }
        guard let scanner = self.scanners[task.kind] else {
            return ScanResult(
                id: task.id,
                attempt: task.attempt,
                outcome: .failed("no scanner for kind \"\(task.kind)\" on \(self.name)"),
                system: self.name
            )
        }
        let slot = await self.acquireSlot()
        // Check state again: we may have waited for the slot while the task was cancelled.
        defer { self.releaseSlot(slot) }
        self.running += 1
        self.peakRunning = max(self.peakRunning, self.running)
        let busy = self.running
        defer { self.running -= 1 }
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
        let outcome = await Self.execute(scanner, task)
        let duration = ContinuousClock.now - start
        if case .completed = outcome { self.completedCount += 1 } else { self.failedCount += 1 }
        return ScanResult(
            id: task.id,
            attempt: task.attempt,
            outcome: outcome,
            system: self.name,
            duration: duration,
            slot: slot,
            busy: busy
        )
    }

    private func acquireSlot() async -> Int {
        if let slot = self.freeSlots.popLast() { return slot }
        return await withCheckedContinuation { self.waiters.append($0) }
    }

    private func releaseSlot(_ slot: Int) {
        // Hand the slot straight to the next waiter, so a newcomer cannot overtake it.
        if let next = self.waiters.popFirst() {
            next.resume(returning: slot)
        } else {
            self.freeSlots.append(slot)
        }
    }

    /// Runs the scanner off the actor, with the task's timeout if it has one.
    private nonisolated static func execute(_ scanner: any Scanner, _ task: ScanTask) async -> ScanOutcome {
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

    private nonisolated static func scan(_ scanner: any Scanner, _ input: [UInt8]) async -> ScanOutcome {
        do {
            return .completed(try await scanner.scan(input))
        } catch is CancellationError {
            return .cancelled
        } catch {
            if Task.isCancelled { return .cancelled }
            return .failed(String(describing: error))
        }
    }
}
