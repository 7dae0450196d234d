import SkyNetCore

// Jobs of one task: ``Coordinator/run(_:)``, and a chain of them, each started from the last one's
// final result on the coordinator's reactor (``Coordinator/runChain(_:next:)``).
extension Coordinator {
    /// Runs one task as a job of its own and returns its final result: a submit-and-wait without
    /// the event stream, for a caller that only wants the answer (the retry policy applies as for any
    /// job; its intermediate events are not reported). Cancelling the calling task cancels the job,
    /// and the result then says cancelled.
    /// - Throws: ``CoordinatorError`` as ``submit(_:)`` does, also when the broker is unreachable.
    public func run(_ task: ScanTask) async throws -> FinalResult {
        try self.checkCanStart()
        let serial = self.jobSerial + 1
        return try await withTaskCancellationHandler {
            // Unsafe: resumed exactly once (see ``Delivery/single(_:)``).
            try await withUnsafeThrowingContinuation { continuation in
                do throws(CoordinatorError) {
                    try self.startOne(task, delivery: .single(continuation))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            Task { await self.cancel(serial: serial) }
        }
    }

    /// Runs tasks one after another, each as a job of its own (as ``run(_:)`` runs one, with the
    /// retry policy), and hands each final result to `next`, which returns the task to run after it,
    /// or `nil` to end the chain. Returns when the chain ends.
    ///
    /// `next` is called on the coordinator's reactor, isolated to the coordinator, as each task's
    /// final result comes in, and the next task leaves in the same turn: no Swift task suspends or
    /// changes executor between one task and the next, so a chain costs less per task than a loop of
    /// ``run(_:)`` calls (in `skynet bench latency`, about 3,500 instructions a round trip fewer).
    /// `next` must not block: while it runs, the coordinator does nothing else.
    ///
    /// Cancelling the calling task cancels the running task's job: its final result (cancelled,
    /// unless it completed meanwhile) still goes to `next`, and the chain then ends, whatever `next`
    /// returns.
    ///
    /// ```swift
    /// var total = 0
    /// try await coordinator.runChain(.sector(1)) { result in
    ///     total += result.output.count
    ///     return total < 1_000 ? .sector(total) : nil
    /// }
    /// ```
    /// - Throws: ``CoordinatorError`` as ``run(_:)`` does, for any task of the chain (the chain then
    ///   ends), or what `next` throws.
    public func runChain(
        _ first: ScanTask,
        next: sending (FinalResult) throws -> ScanTask?
    ) async throws {
        try self.checkCanStart()
        let serial = self.jobSerial + 1
        try await withoutActuallyEscaping(next) { next in
            try await withTaskCancellationHandler {
                // Unsafe: resumed exactly once, by ``Chain/finish(throwing:)``.
                try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                    let chain = Chain(serial: serial, next: next, continuation: continuation)
                    self.startLink(first, of: chain)
                }
            } onCancel: {
                Task { await self.cancel(serial: serial) }
            }
        }
    }

    /// A chain's state while it runs: held by its running job's ``Delivery/chain(_:)``.
    final class Chain {
        /// The serial of the chain's first job: tells this chain from a later one (a late
        /// cancellation must not hit another).
        let serial: Int
        /// The caller's `next`, dropped as the chain ends: it does not escape the call
        /// (`withoutActuallyEscaping` checks that nothing holds it once the call returns).
        private var next: ((FinalResult) throws -> ScanTask?)?
        private let continuation: UnsafeContinuation<Void, any Error>
        /// The caller's task was cancelled: the chain ends with the running job.
        var cancelled = false

        init(
            serial: Int,
            next: @escaping (FinalResult) throws -> ScanTask?,
            continuation: UnsafeContinuation<Void, any Error>
        ) {
            self.serial = serial
            self.next = next
            self.continuation = continuation
        }

        /// The task to run after `final`, or nil: the chain ends (cancelled, or `next` said so).
        func task(after final: consuming FinalResult) throws -> ScanTask? {
            guard let next = self.next else { return nil }
            let task = try next(final)
            return self.cancelled ? nil : task
        }

        /// Ends the chain: ``Coordinator/runChain(_:next:)`` returns, or throws `error`. Once only
        /// (the caller's `next` is gone after the first).
        func finish(throwing error: (any Error)?) {
            guard self.next != nil else { return }
            self.next = nil
            if let error { self.continuation.resume(throwing: error) } else { self.continuation.resume() }
        }
    }

    /// Starts a job of one task (``run(_:)``, a link of ``runChain(_:next:)``) in the list the last
    /// one-task job left (the caller has called ``checkCanStart()``, with no suspension since).
    func startOne(_ task: ScanTask, delivery: consuming Delivery) throws(CoordinatorError) {
        var tasks: [ScanTask] = []
        swap(&tasks, &self.spareTasks)
        tasks.append(task)
        try self.start(tasks, delivery: delivery)
    }

    /// Starts the chain's next task as a job of its own; a task that cannot start ends the chain.
    func startLink(_ task: ScanTask, of chain: Chain) {
        do throws(CoordinatorError) {
            try self.checkCanStart()
            try self.startOne(task, delivery: .chain(chain))
        } catch {
            chain.finish(throwing: error)
        }
    }

    /// A chain's job ended with its final result (`self.job` is already nil): hands it to `next` and
    /// starts the task that returns. (No one-task job ends inside ``start(_:delivery:open:)``, whose
    /// task has gone to the broker or waits for it, so this never calls itself.)
    func advance(_ chain: Chain, after job: Job) {
        guard let final = job.final.take() else {
            chain.finish(throwing: CoordinatorError.noFinalResult)
            return
        }
        let task: ScanTask?
        do {
            task = try chain.task(after: final)
        } catch {
            chain.finish(throwing: error)
            return
        }
        guard let task else {
            chain.finish(throwing: nil)
            return
        }
        self.startLink(task, of: chain)
    }

    /// A late cancellation of a ``run(_:)`` or a ``runChain(_:next:)`` (`serial`: its first job's):
    /// cancels the running job if it is still theirs (a chain then ends with it).
    func cancel(serial: Int) {
        guard let job = self.job else { return }
        if case .chain(let chain) = job.delivery {
            guard chain.serial == serial else { return }
            chain.cancelled = true
        } else {
            guard job.serial == serial else { return }
        }
        self.cancel(reason: "cancelled")
    }
}
