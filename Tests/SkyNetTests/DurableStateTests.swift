import Testing

@testable import SkyNet
@testable import SkyNetCore

/// The durable broker's pure parts: the commit pipeline, detached jobs, lease deadlines, and the
/// clients' view of broker liveness. No socket, no file: events in, decisions out, a test clock.
@Suite("Durable broker state: commit pipeline, detached jobs, lease deadlines")
struct DurableStateTests {
    let t0 = ContinuousClock.now
    let coordinator = PeerID(Array("c-1".utf8))
    let other = PeerID(Array("c-2".utf8))
    let worker = PeerID(Array("w-a".utf8))

    func jobResult(_ job: TaskID, _ id: TaskID, _ status: ResultStatus) -> [[UInt8]] {
        WireMessage.jobResult(
            job: job,
            id,
            attempt: 1,
            status,
            ResultMeta(system: "w", durationMicroseconds: 0, slot: 0, busy: 0),
            body: [],
            kind: "sector",
            input: []
        ).encode()
    }

    @Test("an ACCEPTED or a RESULT leaves only once the journal holds what it waits for, in order")
    func commitBeforeSend() {
        var pipeline = CommitPipeline()
        let (a, b) = (TaskID.random(), TaskID.random())
        pipeline.appended(1)  // a's SUBMIT
        pipeline.deferUntilCommitted([[1]], to: self.coordinator)  // a's ACCEPTED
        pipeline.appended(2)  // b's RESULT
        pipeline.deferUntilCommitted([[2]], to: self.other, result: b)
        #expect(!pipeline.isDrained)
        // The commit of record 1 releases the ACCEPTED only: the RESULT waits for record 2.
        #expect(pipeline.committed(1).map(\.frames) == [[[1]]])
        #expect(!pipeline.isDrained)
        // An old or repeated commit releases nothing.
        #expect(pipeline.committed(1).isEmpty)
        let released = pipeline.committed(5)
        #expect(released.map(\.frames) == [[[2]]] && released.first?.result == b)
        #expect(released.first?.coordinator == self.other)
        #expect(pipeline.isDrained && pipeline.committed == 5)
        _ = a
    }

    @Test("a kept result goes to its own coordinator's resend once, and expires with its grace")
    func keptResults() {
        var pipeline = CommitPipeline()
        let (id, late) = (TaskID.random(), TaskID.random())
        pipeline.keep(id, frames: [[7]], for: self.coordinator, until: self.t0 + .seconds(60))
        pipeline.keep(late, frames: [[8]], for: self.coordinator, until: self.t0 + .seconds(1))
        #expect(pipeline.takeResult(id, for: self.other) == nil, "another coordinator's resend")
        #expect(pipeline.takeResult(id, for: self.coordinator) == [[7]])
        #expect(pipeline.takeResult(id, for: self.coordinator) == nil, "given once")
        #expect(pipeline.snapshot().count == 1)
        pipeline.expireResults(now: self.t0 + .seconds(2))
        #expect(pipeline.snapshot().isEmpty && pipeline.takeResult(late, for: self.coordinator) == nil)
    }

    @Test("a detached job: pending tasks, results stored once, followers told the end, status counts")
    func detachedJob() {
        var jobs = DetachedJobs(retention: .seconds(3600))
        let job = TaskID.random()
        let (a, b) = (TaskID.random(), TaskID.random())
        jobs.taskPending(a, of: job, kind: "sector", input: [1], now: self.t0)
        jobs.taskPending(b, of: job, kind: "sector", input: [2], now: self.t0)
        #expect(jobs.pendingTask(a, of: job)?.input == [1])
        let (results, status) = jobs.query(job, follow: true, from: self.coordinator)
        #expect(results.isEmpty && status.tasks == 2 && status.pending == 2 && !status.done)

        let first = jobs.resultCommitted(a, of: job, frames: self.jobResult(job, a, .completed), now: self.t0)
        #expect(first?.followers == [self.coordinator] && first?.finalStatus == nil)
        #expect(jobs.hasResult(a, of: job) && jobs.pendingTask(a, of: job) == nil)
        #expect(jobs.resultCommitted(a, of: job, frames: self.jobResult(job, a, .failed), now: self.t0) == nil)

        let last = jobs.resultCommitted(b, of: job, frames: self.jobResult(job, b, .failed), now: self.t0)
        #expect(last?.followers == [self.coordinator])
        #expect(last?.finalStatus?.done == true && last?.finalStatus?.completed == 1 && last?.finalStatus?.failed == 1)
        // The follow ended with the job; a new query gets both results in commit order.
        let again = jobs.query(job, follow: true, from: self.other)
        #expect(again.results == [self.jobResult(job, a, .completed), self.jobResult(job, b, .failed)])
        #expect(again.status.done && again.status.finished == 2)
        #expect(jobs.status(of: TaskID.random()).error?.contains("unknown job") == true)
    }

    @Test("a job's failed attempt runs again while attempts are left, unless the job is being cancelled")
    func detachedRetries() {
        var jobs = DetachedJobs(retention: .seconds(3600))
        let job = TaskID.random()
        jobs.taskPending(TaskID.random(), of: job, kind: "sector", input: [], now: self.t0)
        #expect(jobs.nextAttempt(after: .failed, attempt: 1, maxAttempts: 3, of: job) == 2)
        #expect(jobs.nextAttempt(after: .timedOut, attempt: 2, maxAttempts: 3, of: job) == 3)
        #expect(jobs.nextAttempt(after: .failed, attempt: 3, maxAttempts: 3, of: job) == nil)
        #expect(jobs.nextAttempt(after: .completed, attempt: 1, maxAttempts: 3, of: job) == nil)
        #expect(jobs.nextAttempt(after: .cancelled, attempt: 1, maxAttempts: 3, of: job) == nil)
        #expect(jobs.cancel(job) && !jobs.cancel(TaskID.random()))
        #expect(jobs.nextAttempt(after: .failed, attempt: 1, maxAttempts: 3, of: job) == nil)
    }

    @Test("recovery from the journal, expiry after the retention, and the compaction snapshot")
    func recoveryAndExpiry() {
        var jobs = DetachedJobs(retention: .seconds(60))
        let (done, busy) = (TaskID.random(), TaskID.random())
        let (a, b) = (TaskID.random(), TaskID.random())
        jobs.recoverResult(a, of: done, frames: self.jobResult(done, a, .completed), now: self.t0)
        jobs.taskPending(b, of: busy, kind: "sector", input: [], now: self.t0)
        #expect(jobs.status(of: done).done && jobs.status(of: done).completed == 1)
        #expect(jobs.snapshot() == [.result(a, coordinator: .job(done), frames: self.jobResult(done, a, .completed))])
        // Within the retention nothing goes; after it, only the finished job with no live task.
        #expect(jobs.expire(now: self.t0 + .seconds(30)) { _ in false }.isEmpty)
        #expect(jobs.expire(now: self.t0 + .seconds(61)) { $0 == done }.isEmpty, "still has queued tasks")
        let forgotten = jobs.expire(now: self.t0 + .seconds(61)) { _ in false }
        #expect(forgotten.map(\.job) == [done] && forgotten.first?.results == [a])
        #expect(jobs.status(of: done).error != nil && jobs.status(of: busy).pending == 1)
        // A coordinator that goes away follows nothing any more.
        _ = jobs.query(busy, follow: true, from: self.coordinator)
        jobs.followerLost(self.coordinator)
        let end = jobs.resultCommitted(b, of: busy, frames: self.jobResult(busy, b, .completed), now: self.t0)
        #expect(end?.followers.isEmpty == true)
    }

    @Test("a lease expires at its deadline unless its own worker and attempt answered")
    func leaseDeadlines() {
        var deadlines = LeaseDeadlines()
        let (a, b) = (TaskID.random(), TaskID.random())
        deadlines.leased(a, to: self.worker, attempt: 1, deadline: self.t0 + .seconds(1))
        deadlines.leased(b, to: self.worker, attempt: 2, deadline: self.t0 + .seconds(5))
        deadlines.answered(b, by: self.worker, attempt: 1)  // a stale attempt's result: not this lease
        deadlines.answered(a, by: PeerID(Array("w-b".utf8)), attempt: 1)  // another worker's
        #expect(deadlines.expire(now: self.t0).isEmpty)
        let expired = deadlines.expire(now: self.t0 + .seconds(2))
        #expect(expired.map(\.id) == [a] && expired.first?.lease.attempt == 1)
        deadlines.answered(b, by: self.worker, attempt: 2)
        #expect(deadlines.isEmpty && deadlines.expire(now: self.t0 + .seconds(60)).isEmpty)
    }

    @Test("a client's view of its broker: answered, lost after silence, a new epoch means a restart")
    func brokerLiveness() {
        var liveness = BrokerLiveness(timeout: .seconds(15), now: self.t0)
        #expect(!liveness.answered && !liveness.isLost(now: self.t0 + .seconds(60)), "never answered: not lost")
        liveness.heard(now: self.t0 + .seconds(1))
        #expect(liveness.answered && !liveness.isLost(now: self.t0 + .seconds(16)))
        #expect(liveness.isLost(now: self.t0 + .seconds(17)))
        let restarts = [0, 7, 7, 8].map { liveness.heartbeat(epoch: $0) }
        #expect(restarts == [false, false, false, true], "only a new epoch means the broker restarted")
    }

    @Test(
        "every client reads its broker the same way: answered, restarted, forgotten, refused, leaving; the broker's interval"
    )
    func brokerSignals() {
        var liveness = BrokerLiveness(timeout: .seconds(3), now: self.t0)
        let now = self.t0 + .seconds(1)
        #expect(liveness.hear(.task(TaskID.random(), attempt: 1, TaskEnvelope(kind: "k"), input: []), now: now) == nil)
        liveness.connected(now: now)
        #expect(
            liveness.hear(.heartbeat(epoch: 5, intervalMilliseconds: 5000), now: now) == .answered(restarted: false)
        )
        #expect(liveness.timeout == .seconds(20), "4 of the broker's 5 s beats, not the client's own 3 s")
        #expect(liveness.hear(.heartbeat(epoch: 5), now: now) == nil)
        #expect(liveness.hear(.heartbeat(epoch: 6), now: now) == .restarted)
        liveness.connected(now: now)
        #expect(
            liveness.hear(.heartbeat(epoch: 9), now: now) == .answered(restarted: true),
            "a new process behind a reconnect"
        )
        #expect(liveness.hear(.disconnect(.unknownPeer, text: "who"), now: now) == .forgotten("who"))
        for reason in [DisconnectReason.wrongPort, .revoked, .limit] {
            #expect(liveness.hear(.disconnect(reason, text: "no"), now: now) == .refused("no"))
        }
        #expect(liveness.hear(.disconnect(.shutdown, text: "bye"), now: now) == .leaving(.shutdown, "bye"))
        #expect(liveness.silent(now: now + .seconds(2)) == .seconds(2))
        // A broker that says it beats once a day is taken at the protocol's longest interval, 60 s.
        _ = liveness.hear(.heartbeat(epoch: 9, intervalMilliseconds: UInt32.max), now: now)
        #expect(liveness.timeout == .seconds(240))
    }
}
