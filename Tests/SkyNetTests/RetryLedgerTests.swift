import Testing

@testable import SkyNet

@Suite("Coordinator retry ledger")
struct RetryLedgerTests {
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
}
