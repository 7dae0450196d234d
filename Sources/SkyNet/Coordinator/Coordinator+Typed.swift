import SkyNetCore
// Typed jobs: a TaskScanner's Input in, its Output (or a TaskFailure) out.

/// Why a task did not complete: it failed every attempt or was cancelled.
public struct TaskFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// `.failed` or `.cancelled`.
    public var status: FinalResult.Status
    /// The last attempt's error (for a scanner's error, its description).
    public var message: String
    /// A ``ScannerError``'s detail bytes, empty when there were none.
    public var detail: [UInt8]
    /// Attempts made.
    public var attempts: Int
    /// Where the last attempt ran.
    public var system: String

    /// The failure a final result that did not complete describes.
    public init(_ result: FinalResult) {
        self.status = result.status
        self.message = result.error ?? result.status.rawValue
        self.detail = result.errorDetail
        self.attempts = result.attempts
        self.system = result.system
    }

    public var description: String {
        "\(self.status.rawValue) after \(self.attempts) attempt\(self.attempts == 1 ? "" : "s") (last on \(self.system)): \(self.message)"
    }
}

/// One typed task's final result, from ``Coordinator/submit(_:_:timeout:cache:)``.
public struct Scanned<S: TaskScanner>: Sendable {
    /// The input's position in the submitted array.
    public let index: Int
    /// The input.
    public let input: S.Input
    /// The output, or why there is none.
    public let result: Result<S.Output, TaskFailure>
    /// The final result as it came (the task, the system, attempts, raw output).
    public let final: FinalResult

    /// The output, when the task completed.
    public var output: S.Output? { try? self.result.get() }
    /// Why it did not complete, when it did not.
    public var error: TaskFailure? {
        guard case .failure(let failure) = self.result else { return nil }
        return failure
    }
    /// The output, or the failure thrown.
    public func get() throws(TaskFailure) -> S.Output { try self.result.get() }
    /// Whether a ``ResultCache`` answered it without running it.
    public var fromCache: Bool { self.final.system == "cache" }

    static func decode(_ final: FinalResult) -> Result<S.Output, TaskFailure> {
        guard final.status == .completed else { return .failure(TaskFailure(final)) }
        do throws(ScanCodingError) {
            return .success(try ScanCoding.decode(S.Output.self, from: final.output, kind: S.kind))
        } catch {
            var failure = TaskFailure(final)
            (failure.status, failure.message) = (.failed, "output cannot be decoded: \(error.message)")
            return .failure(failure)
        }
    }
}

extension Coordinator {
    /// Runs `scanner` on `input` as a job of one task and returns its output. The coordinator re-runs
    /// failed attempts by its retry policy, locally with `scanner` itself.
    ///
    /// ```swift
    /// let primes = try await coordinator.run(CountPrimes(), 1_000_000)
    /// ```
    /// - Throws: ``TaskFailure`` when the task failed every attempt or was cancelled;
    ///   ``ScanCodingError`` when the input cannot be encoded; ``CoordinatorError`` as ``run(_:)``.
    public func run<S: TaskScanner>(
        _ scanner: S,
        _ input: S.Input,
        timeout: Duration? = nil,
        priority: Int32 = 0
    ) async throws -> S.Output {
        self.localSystem.register(scanner)
        let final = try await self.run(try scanner.task(input, priority: priority, timeout: timeout))
        return try Scanned<S>.decode(final).get()
    }

    /// Submits one task per input and streams their typed results as they complete (in completion
    /// order; ``Scanned/index`` tells which input). With a `cache`, inputs it has a result for are
    /// answered without running, identical inputs run once, and completed results are stored.
    ///
    /// ```swift
    /// for try await r in try await coordinator.submit(CountPrimes(), [10, 100, 1000]) {
    ///     print(r.input, r.output ?? -1, r.error?.message ?? "")
    /// }
    /// ```
    /// - Throws: ``ScanCodingError`` when an input cannot be encoded; ``CoordinatorError`` as
    ///   ``submit(_:)``. The stream fails as ``submit(_:)``'s does.
    public func submit<S: TaskScanner>(
        _ scanner: S,
        _ inputs: [S.Input],
        timeout: Duration? = nil,
        cache: ResultCache? = nil
    ) async throws -> ScannedResults<S> {
        self.localSystem.register(scanner)
        // The ids are one random id with the input's index in its low 32 bits: the index of a result
        // is read from its id, with no table to fill and look up.
        let ids = TaskID.Run()
        var tasks: [ScanTask] = []
        tasks.reserveCapacity(inputs.count)
        for (index, input) in inputs.enumerated() {
            tasks.append(try scanner.task(input, id: ids.id(index), timeout: timeout))
        }
        let events: AsyncThrowingStream<[CoordinatorEvent], any Error>
        if let cache {
            events = try await self.submit(tasks, cache: cache)
        } else {
            events = try self.submit(tasks)
        }
        return ScannedResults(events: events, inputs: inputs, ids: ids)
    }
}

/// The typed results of ``Coordinator/submit(_:_:timeout:cache:)``, one ``Scanned`` per input, in
/// completion order. They are taken from the job's event batches as they are read: no task or
/// buffer in between.
public struct ScannedResults<S: TaskScanner>: AsyncSequence, Sendable {
    public typealias Element = Scanned<S>
    public typealias Failure = any Error

    let events: AsyncThrowingStream<[CoordinatorEvent], any Error>
    let inputs: [S.Input]
    let ids: TaskID.Run

    public func makeAsyncIterator() -> Iterator {
        Iterator(events: self.events.makeAsyncIterator(), inputs: self.inputs, ids: self.ids)
    }

    public struct Iterator: AsyncIteratorProtocol {
        var events: AsyncThrowingStream<[CoordinatorEvent], any Error>.AsyncIterator
        let inputs: [S.Input]
        let ids: TaskID.Run
        var batch: [CoordinatorEvent] = []
        var next = 0

        public mutating func next() async throws -> Scanned<S>? {
            while true {
                while self.next < self.batch.count {
                    let event = self.batch[self.next]
                    self.next += 1
                    guard case .final(let final) = event, let index = self.ids.index(of: final.task.id),
                        index < self.inputs.count
                    else { continue }
                    return Scanned(
                        index: index,
                        input: self.inputs[index],
                        result: Scanned<S>.decode(final),
                        final: final
                    )
                }
                guard let batch = try await self.events.next() else { return nil }
                (self.batch, self.next) = (batch, 0)
            }
        }
    }
}
