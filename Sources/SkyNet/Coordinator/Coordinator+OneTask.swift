import SkyNetCore

// A job of one task (``Coordinator/run(_:)``), and a job of tasks one after another, each started
// from the last one's final result on the coordinator's reactor (``Coordinator/runChain(_:next:)``).
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

    /// Runs tasks one after another, and hands each final result to `next`, which returns the task
    /// to run after it, or `nil` to end the chain. Returns when the chain ends.
    ///
    /// The chain is one job (one serial, one summary, its figures reported to the broker as any
    /// job's), whose tasks run one at a time, each with the retry policy as ``run(_:)``'s task.
    /// `next` is called on the coordinator's reactor, isolated to the coordinator, as each task's
    /// final result comes in, and the next task leaves in the same turn: no Swift task suspends or
    /// changes executor between one task and the next, and no job starts or ends, so a chain costs
    /// less per task than a loop of ``run(_:)`` calls (in `skynet bench latency`, about 5,500
    /// instructions a round trip fewer). `next` must not block: while it runs, the coordinator
    /// does nothing else.
    ///
    /// Cancelling the calling task cancels the job: the running task's final result (cancelled,
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
                    let chain = Chain(next: next, continuation: continuation)
                    do throws(CoordinatorError) {
                        try self.checkCanStart()
                        try self.start([first], delivery: .chain(chain), open: true)
                    } catch {
                        chain.finish(throwing: error)
                    }
                }
            } onCancel: {
                Task { await self.cancel(serial: serial) }
            }
        }
    }

    /// A chain's state while it runs: held by its job's ``Delivery/chain(_:)``.
    final class Chain {
        /// The caller's `next`, dropped as the chain ends: it does not escape the call
        /// (`withoutActuallyEscaping` checks that nothing holds it once the call returns).
        private var next: ((FinalResult) throws -> ScanTask?)?
        private let continuation: UnsafeContinuation<Void, any Error>
        /// Why the chain ended early (`next` threw, or its task could not be added): the job ends
        /// as any job does, and ``finish(throwing:)`` then throws this.
        var failure: (any Error)?

        init(next: @escaping (FinalResult) throws -> ScanTask?, continuation: UnsafeContinuation<Void, any Error>) {
            self.next = next
            self.continuation = continuation
        }

        /// The task to run after `final`, or nil: the chain ends.
        func task(after final: consuming FinalResult) throws -> ScanTask? {
            guard let next = self.next else { return nil }
            return try next(final)
        }

        /// Ends the chain: ``Coordinator/runChain(_:next:)`` returns, or throws `error` (else
        /// ``failure``, if any). Once only (the caller's `next` is gone after the first).
        func finish(throwing error: (any Error)?) {
            guard self.next != nil else { return }
            self.next = nil
            if let error = error ?? self.failure {
                self.continuation.resume(throwing: error)
            } else {
                self.continuation.resume()
            }
        }
    }

    /// Starts a job of one task (``run(_:)``) in the list the last one left (the caller has called
    /// ``checkCanStart()``, with no suspension since).
    func startOne(_ task: ScanTask, delivery: consuming Delivery) throws(CoordinatorError) {
        var tasks: [ScanTask] = []
        swap(&tasks, &self.spareTasks)
        tasks.append(task)
        try self.start(tasks, delivery: delivery)
    }

    /// A chain's task has its final result (`job` has no task outstanding): hands it to `next`, and
    /// adds the task that returns to the job, the chain's last one forgotten (a long chain's ledger
    /// does not grow). When the job is closed (cancelled), `next` returns nil or throws, or its task
    /// cannot be added, the job is closed and ends as any job does (``finishIfDone()``).
    func advance(_ chain: Chain, in job: Job) {
        do {
            guard let final = job.final.take() else { throw CoordinatorError.noFinalResult }
            if let task = try chain.task(after: final), job.open {
                job.ledger.forgetFinished()
                job.nextToSend = 0
                try CoordinatorError.check(task)
                try self.add(task, to: job)
                self.sendMore()
                return
            }
        } catch {
            chain.failure = error
        }
        job.open = false
    }

    /// A late cancellation of a ``run(_:)`` or a ``runChain(_:next:)`` (`serial`: its job's): cancels
    /// the running job if it is still theirs (a chain then ends with the task it runs).
    func cancel(serial: Int) {
        guard let job = self.job, job.serial == serial else { return }
        self.cancel(reason: "cancelled")
    }
}
