import Testing

@testable import SkyNet
@testable import SkyNetCore

@Suite("Coordinator retry ledger")
struct RetryLedgerTests {
    @Test("a final result's error reads back as given: none, empty, or text, and set again")
    func finalResultError() {
        let task = ScanTask.sector(1)
        var result = FinalResult(task: task, status: .completed, attempts: 1, system: "w")
        #expect(result.error == nil)
        let empty = FinalResult(task: task, status: .failed, attempts: 1, system: "w", error: "")
        #expect(empty.error == "")
        #expect(empty != result.with(status: .failed), "an empty error is not no error")
        result.error = "boom"
        #expect(result.error == "boom")
        #expect(result == FinalResult(task: task, status: .completed, attempts: 1, system: "w", error: "boom"))
        result.error = nil
        #expect(result.error == nil)
        #expect(result == FinalResult(task: task, status: .completed, attempts: 1, system: "w"))
    }

    @Test("a finished ledger hands its storage on emptied; the next job starts clean in it; a big one is not kept")
    func storageHandedOn() {
        var first = RetryLedger(policy: .local())
        #expect(first.add(contentsOf: (1...3).map { ScanTask.sector($0) }) == nil)
        #expect(first.add(contentsOf: [ScanTask.sector(4)]) == nil)
        let entries = first.takeEntryStorage()
        let tasks = first.takeTaskStorage()
        #expect(entries.isEmpty && entries.capacity >= 4)
        #expect(tasks.isEmpty && tasks.capacity >= 4)

        var next = RetryLedger(policy: .local(), entryStorage: entries)
        #expect(next.entries.isEmpty && next.tasks.isEmpty && next.outstanding == 0)
        // The same ids again: a new job, not duplicates of the last one.
        let again = ScanTask.sector(1)
        let added = next.add(again)
        #expect(added)
        #expect(next.index(of: again.id) == 0 && next.entries.count == 1 && next.outstanding == 1)
        let accepted = next.accepted(again.id)
        #expect(accepted && next.task(again.id) == again)

        // A non-empty array given as storage is emptied first.
        let leftover = [RetryLedger.Entry(attempt: 9)]
        #expect(RetryLedger(policy: .local(), entryStorage: leftover).entries.isEmpty)

        var big = RetryLedger(policy: .local())
        #expect(big.add(contentsOf: (1...2_000).map { ScanTask.sector($0) }) == nil)
        let bigEntries = big.takeEntryStorage()
        let bigTasks = big.takeTaskStorage()
        #expect(bigEntries.capacity == 0, "a big job's table is let go")
        #expect(bigTasks.capacity == 0)
    }

    @Test("a ledger whose tasks are all final forgets them and goes on: the summary adds up, a late result is stale")
    func forgetFinished() {
        var ledger = RetryLedger(policy: .local(maxAttempts: 2))
        var ids: [TaskID] = []
        for sector in 1...3 {
            let task = ScanTask.sector(sector)
            ids.append(task.id)
            let added = ledger.add(task)
            #expect(added)
            let sent = ledger.markSent(task.id)
            #expect(sent && ledger.unanswered == 1)
            let bytes: [UInt8] = [UInt8(sector)]
            let completion = bytes.withUnsafeBytes { output in
                ledger.recordCompleted(task.id, attempt: 1, system: "w", output: output) { _ in }
            }
            #expect(completion == .final && ledger.outstanding == 0 && ledger.unanswered == 0)
            let capacity = ledger.tasks.capacity
            ledger.forgetFinished()
            #expect(ledger.tasks.isEmpty && ledger.entries.isEmpty && ledger.index(of: task.id) == nil)
            #expect(ledger.tasks.capacity == capacity, "its storage kept for the next task")
        }
        #expect(ledger.summary.tasks == 3 && ledger.summary.completed == 3)
        // A result for a forgotten task is stale, not a duplicate; its id may come again as a new task.
        let late: [UInt8] = [9]
        let completion = late.withUnsafeBytes { output in
            ledger.recordCompleted(ids[0], attempt: 1, system: "w", output: output) { _ in }
        }
        #expect(completion == .stale)
        #expect(ledger.summary.duplicates == 0)
        // Tasks with ids in a run, then one out of it: both forgotten alike.
        let run = TaskID.Run()
        #expect(ledger.add(contentsOf: [ScanTask.sector(5, id: run.id(0)), ScanTask.sector(6, id: run.id(1))]) == nil)
        let stray = ScanTask.sector(7)
        let added = ledger.add(stray)
        #expect(added && ledger.outstanding == 3)
        for (index, task) in ledger.tasks.enumerated() {
            guard case .final = ledger.record(task.id, attempt: 1, outcome: .completed([]), system: "w") else {
                Issue.record("expected final for task \(index)")
                return
            }
        }
        ledger.forgetFinished()
        #expect(ledger.index(of: stray.id) == nil && ledger.outstanding == 0)
        let again = ledger.add(stray)
        #expect(again && ledger.index(of: stray.id) == 0)
        #expect(ledger.summary.tasks == 7 && ledger.summary.completed == 6)
    }

    @Test("a ledger asked for one kind's outputs keeps those and leaves the others' behind")
    func outputsOfOneKind() {
        var ledger = RetryLedger(policy: .local(), outputs: .onlyOfKind("exec"))
        let sector = ScanTask.sector(1)
        let command = ScanTask(kind: "exec", input: [9])
        let local = ScanTask.sector(2)
        #expect(ledger.add(sector) && ledger.add(command) && ledger.add(local))
        var finals: [FinalResult] = []
        for task in [sector, command] {
            let bytes: [UInt8] = [1, 2, 3]
            let completion = bytes.withUnsafeBytes { output in
                ledger.recordCompleted(task.id, attempt: 1, system: "w", output: output) { finals.append($0) }
            }
            #expect(completion == .final)
        }
        #expect(finals.map(\.output) == [[], [1, 2, 3]])
        #expect(finals.allSatisfy { $0.status == .completed })
        // A local attempt's completion follows the same rule.
        guard case .final(let result) = ledger.record(local.id, attempt: 1, outcome: .completed([4]), system: "local")
        else {
            Issue.record("expected final")
            return
        }
        #expect(result.status == .completed && result.output.isEmpty)
        var all = RetryLedger(policy: .local())
        _ = all.add(sector)
        guard case .final(let kept) = all.record(sector.id, attempt: 1, outcome: .completed([4]), system: "w") else {
            Issue.record("expected final")
            return
        }
        #expect(kept.output == [4], "every output by default")
    }

    @Test("a failed attempt re-runs locally until max attempts, then is final")
    func localRetries() {
        var ledger = RetryLedger(policy: .local(maxAttempts: 3))
        let task = ScanTask.sector(9)
        let added = ledger.add(task)
        #expect(added)
        guard
            case .retryLocal(let second) = ledger.record(
                task.id,
                attempt: 1,
                outcome: .failed("boom"),
                system: "worker-a"
            )
        else {
            Issue.record("expected a local retry")
            return
        }
        #expect(second.attempt == 2 && second.id == task.id)
        guard case .retryLocal(let third) = ledger.record(task.id, attempt: 2, outcome: .timedOut, system: "local")
        else {
            Issue.record("expected a local retry")
            return
        }
        #expect(third.attempt == 3)
        guard case .final(let result) = ledger.record(task.id, attempt: 3, outcome: .failed("still"), system: "local")
        else {
            Issue.record("expected a final failure")
            return
        }
        #expect(result.status == .failed && result.attempts == 3 && result.error == "still")
        #expect(ledger.outstanding == 0)
        #expect(ledger.summary.retried == 2 && ledger.summary.retriedLocally == 2 && ledger.summary.failed == 1)
    }

    @Test("remote retries resubmit; none makes the first failure final")
    func placements() {
        var remote = RetryLedger(policy: .remote(maxAttempts: 2))
        let task = ScanTask.sector(1)
        _ = remote.add(task)
        guard case .retryRemote(let next) = remote.record(task.id, attempt: 1, outcome: .failed("x"), system: "w")
        else {
            Issue.record("expected a remote retry")
            return
        }
        #expect(next.attempt == 2)
        var none = RetryLedger(policy: .none())
        _ = none.add(task)
        guard case .final(let result) = none.record(task.id, attempt: 1, outcome: .failed("x"), system: "w") else {
            Issue.record("expected a final failure")
            return
        }
        #expect(result.status == .failed && result.attempts == 1)
    }

    @Test("the first final result wins; later ones are duplicates, old failures are stale")
    func exactlyOnce() {
        var ledger = RetryLedger(policy: .local())
        let task = ScanTask.sector(3)
        _ = ledger.add(task)
        _ = ledger.requeued(task.id, attempt: 2)
        let late = ledger.record(task.id, attempt: 1, outcome: .failed("late"), system: "w-old")
        #expect(late == .stale)
        // A completion from an older attempt still completes the task.
        guard case .final(let result) = ledger.record(task.id, attempt: 1, outcome: .completed([1]), system: "w-old")
        else {
            Issue.record("expected final")
            return
        }
        #expect(result.status == .completed && result.output == [1])
        let second = ledger.record(task.id, attempt: 2, outcome: .completed([2]), system: "w-new")
        #expect(second == .duplicate)
        #expect(ledger.summary.duplicates == 1 && ledger.summary.completed == 1 && ledger.summary.requeued == 1)
        let unknown = ledger.record(TaskID.random(), attempt: 1, outcome: .completed([]), system: "w")
        #expect(unknown == .stale)
        let addedTwice = ledger.add(task)
        #expect(!addedTwice, "the same id twice in a job is refused")
    }

    @Test("when the broker is lost a remote retry becomes final, and only remote attempts are unfinished")
    func brokerLost() {
        var ledger = RetryLedger(policy: .remote(maxAttempts: 3))
        let a = ScanTask.sector(1)
        _ = ledger.add(a)
        #expect(ledger.unfinishedRemote.map(\.0) == [a.id])
        guard
            case .final = ledger.record(
                a.id,
                attempt: 1,
                outcome: .failed("broker lost"),
                system: "broker",
                remoteAllowed: false
            )
        else {
            Issue.record("expected final")
            return
        }
        var local = RetryLedger(policy: .local())
        _ = local.add(a)
        _ = local.record(a.id, attempt: 1, outcome: .failed("x"), system: "w")
        #expect(local.unfinishedRemote.isEmpty, "a task re-running locally does not wait for the broker")
    }

    @Test(
        "cancelling: local tasks end at once, remote ones are named for CANCEL; results then end them without retries"
    )
    func cancel() {
        var ledger = RetryLedger(policy: .local(maxAttempts: 3))
        let a = ScanTask.sector(1, id: TaskID(high: 0, low: 1))
        let b = ScanTask.sector(2, id: TaskID(high: 0, low: 2))
        let c = ScanTask.sector(3, id: TaskID(high: 0, low: 3))
        let d = ScanTask.sector(4, id: TaskID(high: 0, low: 4))
        for task in [a, b, c, d] { _ = ledger.add(task) }
        _ = ledger.record(b.id, attempt: 1, outcome: .failed("x"), system: "w")  // b re-runs locally
        let (remote, finals) = ledger.cancel(reason: "interrupted")
        #expect(remote == [a.id, c.id, d.id])
        #expect(finals.map(\.task.id) == [b.id] && finals[0].status == .cancelled && finals[0].system == "local")
        // A result that completed meanwhile still counts as completed.
        #expect(ledger.record(a.id, attempt: 1, outcome: .completed([1]), system: "w") != .stale)
        // A failure is not retried any more.
        guard case .final(let failed) = ledger.record(c.id, attempt: 1, outcome: .failed("y"), system: "w") else {
            Issue.record("expected final")
            return
        }
        #expect(failed.status == .cancelled)
        #expect(!ledger.isCurrent(c.id, attempt: 1))
        let rest = ledger.cancelRemaining(reason: "no answer")
        #expect(rest.map(\.task.id) == [d.id] && rest[0].status == .cancelled)
        #expect(ledger.outstanding == 0)
        #expect(ledger.summary.completed == 1 && ledger.summary.cancelled == 3 && ledger.summary.failed == 0)
        #expect(ledger.summary.deadLetters.isEmpty, "cancelled tasks are not dead letters")
    }

    @Test("the SUBMIT window: a task is sent once, only sent tasks are resent, ended ones are not sent")
    func sendWindow() {
        var ledger = RetryLedger(policy: .local(maxAttempts: 3))
        let a = ScanTask.sector(1, id: TaskID(high: 0, low: 1))
        let b = ScanTask.sector(2, id: TaskID(high: 0, low: 2))
        let c = ScanTask.sector(3, id: TaskID(high: 0, low: 3))
        for task in [a, b, c] { _ = ledger.add(task) }
        let first = ledger.markSent(a.id)
        let second = ledger.markSent(a.id)
        #expect(first && !second, "sent once")
        #expect(
            ledger.unfinishedRemoteTasks.map(\.id) == [a.id],
            "a resend after a broker restart covers sent tasks only"
        )
        _ = ledger.fail(b.id, reason: "x", system: "broker")
        let endedSent = ledger.markSent(b.id)
        #expect(!endedSent, "an ended task is not sent")
        _ = ledger.record(c.id, attempt: 1, outcome: .failed("broker lost"), system: "broker")
        let localSent = ledger.markSent(c.id)
        #expect(!localSent, "a task re-running locally is not sent")
        #expect(ledger.isSent(a.id) && !ledger.isSent(c.id))
        #expect(ledger.unanswered == 1, "a is out and unanswered")
        _ = ledger.accepted(a.id)
        #expect(ledger.unanswered == 0, "ACCEPTED answers it")
    }

    @Test("numbered ids (a run) are found by their number, others through the table; duplicates are refused either way")
    func runsAndTable() {
        let run = TaskID.Run()
        var ledger = RetryLedger(policy: .none())
        let numbered = (0..<5).map { ScanTask.sector($0, id: run.id($0)) }
        #expect(ledger.add(contentsOf: numbered) == nil)
        // A random id after the run, then the run's next number: both go to the table.
        let stray = ScanTask.sector(99)
        let late = ScanTask.sector(5, id: run.id(5))
        #expect(ledger.add(stray) && ledger.add(late))
        // The same ids again, and an id of the run whose number is already taken.
        #expect(!ledger.add(stray) && !ledger.add(late) && !ledger.add(ScanTask.sector(7, id: run.id(2))))
        #expect(ledger.add(contentsOf: [ScanTask.sector(8, id: run.id(3))]) == run.id(3))
        for (place, task) in (numbered + [stray, late]).enumerated() {
            #expect(ledger.index(of: task.id) == place)
            #expect(ledger.task(task.id)?.sector == task.sector)
        }
        // Ids near the run's but not in it: the next number, the one before the first, another run's.
        #expect(ledger.index(of: run.id(6)) == nil)
        #expect(ledger.index(of: TaskID(high: run.base.high, low: run.id(0).low &- 1)) == nil)
        #expect(ledger.index(of: TaskID.Run().id(0)) == nil)
        // Each found entry is the task's own: ending one leaves the others.
        guard case .final(let result) = ledger.record(late.id, attempt: 1, outcome: .completed([1]), system: "w") else {
            Issue.record("expected a final result")
            return
        }
        #expect(result.task.id == late.id && ledger.outstanding == 6)
        guard case .duplicate = ledger.record(late.id, attempt: 1, outcome: .completed([1]), system: "w") else {
            Issue.record("expected a duplicate")
            return
        }
        #expect(ledger.markSent(at: 0) && !ledger.markSent(numbered[0].id) && ledger.isSent(numbered[0].id))
        #expect(ledger.unfinishedRemote.map(\.0) == (numbered + [stray]).map(\.id).sorted())
    }

    @Test("a job whose ids do not follow one another is kept in the table alone")
    func noRun() {
        var ledger = RetryLedger(policy: .none())
        let tasks = (0..<50).map { ScanTask.sector($0) }
        #expect(ledger.add(contentsOf: tasks) == nil)
        for (place, task) in tasks.enumerated() { #expect(ledger.index(of: task.id) == place) }
        #expect(ledger.add(contentsOf: [tasks[17]]) == tasks[17].id)
    }
}

extension FinalResult {
    fileprivate func with(status: Status) -> FinalResult {
        var copy = self
        copy.status = status
        return copy
    }
}
