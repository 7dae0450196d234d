import Logging
import SkyNetCore
import Synchronization
import ZeroMQ

// A worker's scans: started as their TASKs come, done at once where the scanner can, their RESULTs
// sent as they finish.
extension Worker {
    // MARK: Running tasks

    /// Starts one task's scan. One its scanner can answer at once (``TaskScanner/scanImmediately(_:)``)
    /// is done right here, with the input read where it arrived, and its RESULT written from the
    /// output where the scan left it, with the others of this reactor turn: such a task costs no
    /// allocation (the sector scanner's output is on the stack). Any other runs in the ScanSystem as
    /// a task of its own (``startScan(_:)``).
    ///
    /// `connection` is the one the TASK came on, passed down by the caller, which holds it for its
    /// whole batch: read from `self` for every RESULT, the class reference was retained and released
    /// each time (~250 instructions a task, when the connection was still weakly referenced and took
    /// the runtime's slow path).
    func start(
        _ id: TaskID,
        attempt: UInt32,
        _ envelope: TaskEnvelope,
        input: UnsafeRawBufferPointer,
        on connection: DealerConnection?
    ) {
        if self.logsDebug {
            self.logger.debug("scan started", metadata: ["task.id": "\(id)", "attempt": "\(attempt)"])
        }
        // The connection goes to the closure as its context, not as a capture, and the closure
        // captures no class: its captures were retained and released for every scan, the worker's
        // through the runtime's slow path (it is weakly referenced).
        // The connection itself (borrowed, as the caller holds it), not `resultTarget(connection)`: a
        // new optional reference, retained and released for every scan.
        let (name, sends) = (self.system.name, self.sendsResults)
        let done = self.system.runImmediately(kind: envelope.kind, input: input, with: connection) {
            connection,
            outcome,
            nanoseconds,
            slot,
            busy in
            guard sends else { return }
            let meta = ResultMeta(system: name, nanoseconds: nanoseconds, slot: slot, busy: busy)
            switch outcome {
            case .completed(let output):
                connection?.sendResult(id, attempt: attempt, .completed, meta, body: output)
            case .failed(let failure):
                failure.body.withUnsafeBytes { connection?.sendResult(id, attempt: attempt, .failed, meta, body: $0) }
            }
        }
        if done {
            self.reported()
        } else {
            self.startScan(ScanTask(id: id, attempt: attempt, envelope: envelope, input: Array(input)))
        }
    }

    /// How a scan that is running (or waiting for a slot loop) is cancelled.
    enum Running {
        /// A task of its own (a scan that may block, on the global pool).
        case task(@Sendable () -> Void)
        /// Scan `run` of the slot loops.
        case loop(SlotLoops.Run)
    }

    /// Starts one task's scan in the ScanSystem (it could not be done at once): one that never blocks
    /// in a slot loop on this reactor, any other as a task of its own on the global pool (so
    /// heartbeats go out whatever it does); and keeps a way to cancel it.
    func startScan(_ task: ScanTask) {
        let id = task.id
        let timeout = task.timeout
        let run: Running
        if self.system.neverBlocks(task) {
            self.nextRun &+= 1
            run = .loop(self.nextRun)
            guard self.slotLoops.submit(task, run: self.nextRun) else { return }
        } else {
            let scan = Task.detached { [system, weak self] in
                let result = await system.run(task)
                guard let self else { return }
                let first = self.finishedResults.withLock { results -> Bool in
                    results.append(result)
                    return results.count == 1
                }
                // The first result into an empty buffer takes them all to the reactor; the others ride along.
                if first { await self.sendFinished() }
            }
            run = .task({ scan.cancel() })
        }
        if self.running.updateValue(run, forKey: id) != nil {
            // An earlier run of this task has not finished (its coordinator was lost, the broker
            // cancelled it, and the task came back): that run's result must not end this run's
            // bookkeeping, and its deadline is not this run's.
            self.overlapping[id, default: 0] += 1
            if let timer = self.deadlines.removeValue(forKey: id) { self.reactor.cancel(timer) }
        }
        guard let timeout else { return }
        self.deadlines[id] = self.reactor.schedule(after: timeout) { [weak self] in
            self?.assumeIsolated { worker in
                worker.deadlines[id] = nil
                guard worker.running[id] != nil else { return }
                worker.timedOut.insert(id)
                worker.cancelRun(id)
            }
        }
    }

    /// Cancels the scan of task `id`, if it runs here. One still waiting for a slot loop ends at once,
    /// as cancelled.
    func cancelRun(_ id: TaskID) {
        switch self.running[id] {
        case .task(let cancel):
            cancel()
        case .loop(let run):
            if let task = self.slotLoops.cancel(run) { self.finished(self.cancelled(task)) }
        case nil:
            break
        }
    }

    /// Cancels every scan here (the worker stops, or its drain timed out).
    func cancelAll() {
        for id in Array(self.running.keys) { self.cancelRun(id) }
    }

    /// The result of a scan cancelled before it ran.
    func cancelled(_ task: ScanTask) -> ScanResult {
        ScanResult(id: task.id, attempt: task.attempt, outcome: .cancelled, system: self.system.name)
    }

    /// Sends the RESULTs of the scans that finished since the last call.
    func sendFinished() {
        let results = self.finishedResults.withLock { results in
            defer { results.removeAll(keepingCapacity: true) }
            return results
        }
        for result in results { self.finished(result) }
    }

    /// Sends the RESULT of a scan that ran as a task of its own (in `running`, perhaps with a
    /// deadline).
    func finished(_ result: consuming ScanResult) {
        var outcome = result.outcome
        if !self.overlapping.isEmpty, let earlier = self.overlapping[result.id] {
            // An earlier run of a task that is running again: the later run keeps its entry.
            self.overlapping[result.id] = earlier > 1 ? earlier - 1 : nil
        } else {
            self.running[result.id] = nil
            if let timer = self.deadlines.removeValue(forKey: result.id) { self.reactor.cancel(timer) }
        }
        if !self.timedOut.isEmpty, self.timedOut.remove(result.id) != nil, outcome == .cancelled {
            outcome = .timedOut
        }
        let (id, attempt, meta) = (result.id, result.attempt, result.meta)
        outcome.body.withUnsafeBytes { self.report(id, attempt: attempt, outcome.status, meta, body: $0) }
    }

    /// Sends an attempt's RESULT (`body` read during the call), unless the tasks were handed back.
    func report(
        _ id: TaskID,
        attempt: UInt32,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: UnsafeRawBufferPointer
    ) {
        self.report(id, attempt: attempt, status, meta, body: body, on: self.connection)
    }

    /// ``report(_:attempt:_:_:body:)`` on `connection`, the worker's current one.
    func report(
        _ id: TaskID,
        attempt: UInt32,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: UnsafeRawBufferPointer,
        on connection: DealerConnection?
    ) {
        self.resultTarget(connection)?.sendResult(id, attempt: attempt, status, meta, body: body)
        self.reported()
    }

    /// Where an attempt's RESULT goes: `connection`, unless the tasks were handed back.
    func resultTarget(_ connection: DealerConnection?) -> DealerConnection? {
        self.sendsResults ? connection : nil
    }

    /// Whether an attempt's RESULT goes out: not once the tasks were handed back.
    var sendsResults: Bool { !self.handedBack }

    /// After an attempt's RESULT: a drain ends with the last scan.
    func reported() {
        if self.phase.isDraining, self.running.isEmpty { self.finishDrain() }
    }
}
