package import SkyNet
import Glibc
import Synchronization
package import Logging
package import ZeroMQ

/// Runs one job end to end and prints it: the wiring behind `skynet submit` and `skynet demo`,
/// callable without parsing a command line.
package struct JobRunner: Sendable {
    /// Where output goes: standard output, standard error, and the terminal's progress line (nil
    /// when not a TTY).
    package struct Output: Sendable {
        /// Writes to standard output: nil, or the `errno` of the write that failed (a full disk, a
        /// closed pipe), which the job counts and reports rather than losing results in silence.
        package var writeBytes: @Sendable ([UInt8]) -> Int32?
        package var writeError: @Sendable ([UInt8]) -> Void
        package var progress: (@Sendable (String?) -> Void)?

        package init(
            writeBytes: @escaping @Sendable ([UInt8]) -> Int32?,
            writeError: @escaping @Sendable ([UInt8]) -> Void = { _ in },
            progress: (@Sendable (String?) -> Void)? = nil
        ) {
            self.writeBytes = writeBytes
            self.writeError = writeError
            self.progress = progress
        }

        /// ``writeBytes`` for text.
        package func write(_ text: String) -> Int32? { self.writeBytes(Array(text.utf8)) }
    }

    package var configuration: CoordinatorConfiguration
    /// The scanners that run local retries (the same kinds as the workers').
    package var scanners: [any TaskScanner]
    package var format: JobReporter.Format
    package var output: Output
    /// Where completed results are looked up and stored (`--cache DIR`), if anywhere.
    package var cache: ResultCache?
    /// Order, job log and results directory.
    package var options: JobOutputOptions

    package init(
        configuration: CoordinatorConfiguration,
        scanners: [any TaskScanner],
        format: JobReporter.Format,
        output: Output,
        cache: ResultCache? = nil,
        options: JobOutputOptions = JobOutputOptions()
    ) {
        self.configuration = configuration
        self.scanners = scanners
        self.format = format
        self.output = output
        self.cache = cache
        self.options = options
    }

    /// Submits `tasks`, prints every final result as it arrives (or in input order) and the summary
    /// at the end. For a job with `exec` tasks, standard output carries only the commands' output;
    /// everything else (retries, failures, the summary) goes to standard error.
    /// - Parameter interrupts: the first element (a reason, e.g. "interrupted") cancels the job: its
    ///   queued and running tasks are cancelled and the partial summary is printed.
    /// - Returns: the job's summary (check ``JobSummary/succeeded``).
    /// - Throws: ``CoordinatorError`` when the broker cannot be reached; ``JobOutputError`` when the
    ///   job log or results directory cannot be written.
    package func run(
        _ tasks: [ScanTask],
        reactor: Reactor,
        logger: Logger,
        interrupts: AsyncStream<String>? = nil
    ) async throws -> JobSummary {
        try await self.run(tasks, more: nil, reactor: reactor, logger: logger, interrupts: interrupts)
    }

    /// ``run(_:reactor:logger:interrupts:)`` for `exec` tasks that come as their input is read
    /// (`tail -f log | skynet submit --exec … --inputs -`): each chunk is submitted as it arrives,
    /// and the job ends once `chunks` ends and every task has its final result. A chunk that fails
    /// (a bad line) cancels the job, and `run` throws that error after the partial summary.
    /// Without a cache (whose plan needs the whole job).
    package func run(
        streaming chunks: AsyncThrowingStream<[ScanTask], any Error>,
        reactor: Reactor,
        logger: Logger,
        interrupts: AsyncStream<String>? = nil
    ) async throws -> JobSummary {
        try await self.run([], more: chunks, reactor: reactor, logger: logger, interrupts: interrupts)
    }

    private func run(
        _ tasks: [ScanTask],
        more: AsyncThrowingStream<[ScanTask], any Error>?,
        reactor: Reactor,
        logger: Logger,
        interrupts: AsyncStream<String>?
    ) async throws -> JobSummary {
        let (format, output, cache) = (self.format, self.output, more == nil ? self.cache : nil)
        let joblog = try self.options.joblog.map { try JobLog(path: $0) }
        let results = try self.options.resultsDirectory.map { try ResultsDirectory(path: $0) }
        let keepOrder = self.options.keepOrder
        let execJob = more != nil || tasks.hasCommands
        // What the job says besides results goes where results do not: standard error for commands'
        // output listed plainly, standard output otherwise.
        let statusToStandardError = execJob && format == .human
        // A human listing prints only commands' output: with nothing else to keep it (a job log, a
        // results directory, a cache), the other results need not carry theirs.
        var configuration = self.configuration
        if format == .human, joblog == nil, results == nil, cache == nil {
            configuration.outputs = .onlyOfKind(ExecScanner.kind)
        }
        return try await Coordinator.withCoordinator(
            configuration: configuration,
            reactor: reactor,
            logger: logger,
            scanners: self.scanners
        ) { coordinator in
            let watcher = Task {
                guard let interrupts else { return }
                for await reason in interrupts {
                    await coordinator.cancel(reason: reason)
                    return
                }
            }
            defer { watcher.cancel() }
            // A result's place in the job, needed only for --keep-order, --joblog and --results.
            let streamed = more != nil
            let needsPlace = keepOrder || joblog != nil || results != nil
            let positions: [TaskID: Int] = {
                var positions: [TaskID: Int] = [:]
                guard needsPlace, !streamed else { return positions }
                positions.reserveCapacity(tasks.count)
                for (index, task) in tasks.enumerated() { positions[task.id] = index }
                return positions
            }()
            // A streamed job's tasks are numbered by their line: that is their place.
            func position(of result: FinalResult) -> Int {
                guard needsPlace else { return 0 }
                return streamed
                    ? ExecView(result).map { max($0.sequence - 1, 0) } ?? 0 : positions[result.task.id] ?? 0
            }
            var printer = ResultPrinter(
                reporter: JobReporter(format: format, total: tasks.count),
                joblog: joblog,
                results: results,
                output: output,
                statusToStandardError: statusToStandardError
            )
            let added = Mutex(0)
            let sourceError = Mutex<(any Error)?>(nil)
            var order = InOrder<(Int, FinalResult)>()
            var lastDraw = ContinuousClock.now - .seconds(1)
            let batches =
                if let cache { Self.finalsApart(try await coordinator.submit(tasks, cache: cache)) } else {
                    try await coordinator.submitWithFinalsApart(tasks, moreToCome: more != nil)
                }
            let feeder = Task {
                guard let more else { return }
                do {
                    for try await chunk in more {
                        try await coordinator.add(chunk)
                        added.withLock { $0 += chunk.count }
                    }
                } catch {
                    sourceError.withLock { $0 = error }
                    await coordinator.cancel(reason: "its input has a bad line")
                }
                await coordinator.endOfTasks()
            }
            defer { feeder.cancel() }
            for try await var batch in batches {
                var others: [CoordinatorEvent] = []
                for event in batch.events {
                    switch event {
                    case .noWorker(let kind):
                        // A kind no worker serves waits at the broker: said on its own line, not in
                        // silence (the coordinator asks the broker a second into the job).
                        output.progress?(nil)
                        let hint =
                            kind == ExecScanner.kind
                            ? " (workers run commands only when started with --allow-command)" : ""
                        output.writeError(
                            Array("skynet: no worker serves \"\(kind)\" yet\(hint); its tasks wait for one\n".utf8)
                        )
                    default: others.append(event)
                    }
                }
                if streamed { printer.reporter.total = added.withLock { $0 } }
                let text = printer.reporter.render(others)
                if output.progress != nil, !text.isEmpty || !batch.finals.isEmpty { output.progress?(nil) }
                if !text.isEmpty { printer.say(text) }
                // The final results, in the batch's order, after what the other events said; each
                // taken out where it lies (`for result in batch.finals`, the array's subscript, a
                // getter, and reading it through a buffer's addressor all copied each result: its
                // task, system and output retained and released after, ~290 instructions a result).
                for index in batch.finals.indices {
                    guard let result = batch.finals[index].take() else { continue }
                    let place = position(of: result)
                    if keepOrder {
                        for (index, released) in order.add(place, (place, result)) {
                            printer.show(released, index: index)
                        }
                    } else {
                        printer.show(result, index: place)
                    }
                }
                printer.flush()
                if let progress = output.progress {
                    let now = ContinuousClock.now
                    if now - lastDraw >= .milliseconds(100) {
                        lastDraw = now
                        progress(printer.reporter.progressLine(now: now))
                    }
                }
            }
            for (index, result) in order.flush() { printer.show(result, index: index) }
            printer.flush()
            output.progress?(nil)
            var summary = await coordinator.summary
            summary.addRecordFailures(of: printer.recording)
            printer.say(printer.reporter.summary(summary) + "\n")
            // Standard output that failed only now, on the summary, still fails the job's exit status.
            if let reason = printer.recording.recordErrors[ResultPrinter.standardOutput],
                summary.recordErrors[ResultPrinter.standardOutput] == nil
            {
                summary.recordFailed(0, output: ResultPrinter.standardOutput, reason: reason)
            }
            for (name, reason) in summary.recordErrors.sorted(by: { $0.key < $1.key }) {
                printer.say("skynet: \(name): results not recorded: \(reason)\n")
            }
            if let error = sourceError.withLock({ $0 }) { throw error }
            return summary
        }
    }

    /// A ``ResultCache`` job's batches (``Coordinator/submit(_:cache:)``) with their final results
    /// apart, as ``Coordinator/submitWithFinalsApart(_:moreToCome:)`` delivers the others.
    static func finalsApart(
        _ batches: AsyncThrowingStream<[CoordinatorEvent], any Error>
    ) -> AsyncThrowingStream<EventBatch, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: EventBatch.self)
        let pump = Task {
            do {
                for try await batch in batches { continuation.yield(EventBatch(batch)) }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in pump.cancel() }
        return stream
    }
}

/// What becomes of each final result as it is released: its line in the job log, its files in the
/// results directory, and what it prints. A struct rather than closures over the job's locals: one
/// result costs no captured context to copy.
private struct ResultPrinter {
    var reporter: JobReporter
    let joblog: JobLog?
    let results: ResultsDirectory?
    let output: JobRunner.Output
    /// Whether the job's other lines (events, the summary) go to standard error from the start.
    let statusToStandardError: Bool
    /// An output that cannot be written stops nothing: the job goes on, the first reason is said at
    /// once and again at the end, and the exit status counts the results it lost.
    var recording = JobSummary()
    /// Standard output's bytes not written yet (``flush()``).
    private var pending: [UInt8] = []
    /// How many completed results printed something into ``pending``: what a failed write loses.
    private var pendingCompleted = 0
    /// Standard output is written at least this often (a batch of large command outputs).
    static let pendingLimit = 64 * 1024
    /// What the job's messages call standard output (its key in ``JobSummary/recordErrors``).
    static let standardOutput = "standard output"

    init(
        reporter: JobReporter,
        joblog: JobLog?,
        results: ResultsDirectory?,
        output: JobRunner.Output,
        statusToStandardError: Bool
    ) {
        self.reporter = reporter
        self.joblog = joblog
        self.results = results
        self.output = output
        self.statusToStandardError = statusToStandardError
    }

    /// Whether a write to standard output has failed: nothing more is written there.
    var standardOutputFailed: Bool { self.recording.recordErrors[Self.standardOutput] != nil }

    /// Says `text` besides the results: on standard error for a listing of commands' output, or once
    /// standard output has failed (so the summary and the reason are still seen), else on standard output.
    mutating func say(_ text: String) {
        self.flush()
        if self.statusToStandardError || self.standardOutputFailed {
            self.output.writeError(Array(text.utf8))
            return
        }
        if let code = self.output.write(text) {
            self.standardOutputBroke(code, losing: 0)
            self.output.writeError(Array(text.utf8))
        }
    }

    mutating func show(_ result: FinalResult, index: Int) {
        if let joblog {
            self.record("--joblog \(joblog.path)", result) { () throws(JobOutputError) in
                try joblog.write(result, index: index)
            }
        }
        if let results {
            self.record("--results \(results.path)", result) { () throws(JobOutputError) in
                try results.write(result, index: index)
            }
        }
        let printed = self.pending.count
        let stderr = self.reporter.output(result, into: &self.pending)
        if result.status == .completed, self.pending.count > printed { self.pendingCompleted += 1 }
        if !stderr.isEmpty {
            // What it printed on standard output before what it says on standard error, as it came.
            self.flush()
            self.output.writeError(stderr)
        } else if self.pending.count >= Self.pendingLimit {
            self.flush()
        }
    }

    /// Writes what the results shown since the last call print on standard output: once per batch of
    /// events (a `write(2)` per result line cost `skynet submit` more CPU than the rest of its work on
    /// a result). Called before anything else is printed, so the order of lines holds. Once a write
    /// has failed, the completed results that would have printed count as not recorded.
    mutating func flush() {
        guard !self.pending.isEmpty else { return }
        let completed = self.pendingCompleted
        let failed = self.standardOutputFailed ? nil : self.output.writeBytes(self.pending)
        self.pending.removeAll(keepingCapacity: true)
        self.pendingCompleted = 0
        if let failed {
            self.standardOutputBroke(failed, losing: completed)
        } else if self.standardOutputFailed {
            self.recording.recordFailed(completed, output: Self.standardOutput, reason: "")
        }
    }

    /// The first failed write to standard output: said on standard error at once, counted, and the
    /// reason kept for the end.
    private mutating func standardOutputBroke(_ code: Int32, losing completed: Int) {
        let reason = String(cString: strerror(code))
        self.output.writeError(Array("skynet: \(Self.standardOutput): \(reason) (the job goes on)\n".utf8))
        self.recording.recordFailed(completed, output: Self.standardOutput, reason: reason)
    }

    private mutating func record(_ output: String, _ result: FinalResult, _ write: () throws(JobOutputError) -> Void) {
        do throws(JobOutputError) {
            try write()
        } catch {
            if self.recording.recordErrors[output] == nil {
                self.say("skynet: \(output): \(error) (the job goes on)\n")
            }
            self.recording.recordFailed(result.status == .completed ? 1 : 0, output: output, reason: "\(error)")
        }
    }
}
