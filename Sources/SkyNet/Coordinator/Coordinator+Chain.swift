import SkyNetCore

// A chain of one-task jobs, each started from the last one's final result on the coordinator's
// reactor: ``Coordinator/runChain(_:next:)``.
extension Coordinator {
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
                Task { await self.cancelChain(serial: serial) }
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
        /// ``Coordinator/advance(_:after:)`` is calling `next` or starting a job. A job that ends
        /// meanwhile, inside ``Coordinator/start(_:delivery:open:)`` (which ends a job that is done
        /// as it starts; none of a chain's is today), leaves its final result in `ended` for that
        /// loop rather than calling `next` from within it, which would nest a call per such task.
        var advancing = false
        var ended: FinalResult?

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
    /// starts the task that returns, until the chain ends.
    func advance(_ chain: Chain, after job: Job) {
        guard let final = job.final.take() else {
            chain.finish(throwing: CoordinatorError(.closed, "the job ended without a final result"))
            return
        }
        guard !chain.advancing else {
            chain.ended = final  // the loop below, further up this stack, takes it
            return
        }
        chain.advancing = true
        defer { chain.advancing = false }
        var current = final
        while true {
            let task: ScanTask?
            do {
                task = try chain.task(after: current)
            } catch {
                chain.finish(throwing: error)
                return
            }
            guard let task else {
                chain.finish(throwing: nil)
                return
            }
            self.startLink(task, of: chain)
            guard let ended = chain.ended.take() else { return }
            current = ended
        }
    }

    func cancelChain(serial: Int) {
        guard let job = self.job, case .chain(let chain) = job.delivery, chain.serial == serial else { return }
        chain.cancelled = true
        self.cancel(reason: "cancelled")
    }
}
