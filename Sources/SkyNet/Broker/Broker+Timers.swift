import ZeroMQ
import Logging
// Time-driven work: the heartbeat tick.
extension Broker {
    /// Every heartbeat interval: peers that went silent are lost (their work requeued or dropped),
    /// leases past their task's deadline expire, kept results and finished jobs past their time are
    /// forgotten, the journal is compacted when due, and every peer gets a HEARTBEAT.
    func heartbeatTick() {
        let now = ContinuousClock.now
        self.checkSecurity()
        self.checkAccepts(now: now)
        if self.journal != nil {
            self.pipeline.expireResults(now: now)
            self.expireJobs(now: now)
            self.maybeCompactJournal()
        }
        self.perform(self.state.tick(now: now))
        if !self.leaseDeadlines.isEmpty {
            for (id, lease) in self.leaseDeadlines.expire(now: now) {
                let actions = self.state.expireLease(id, worker: lease.worker, attempt: lease.attempt)
                if !actions.isEmpty {
                    self.logger.warning(
                        "lease expired: no result by the task's deadline",
                        metadata: ["task.id": "\(id)", "worker.id": "\(lease.worker)", "attempt": "\(lease.attempt)"]
                    )
                }
                self.perform(actions)
            }
        }
        let beat = self.heartbeatMessage
        for worker in self.state.workers.keys { self.sendToWorker(worker, beat) }
        for coordinator in self.state.coordinators.keys where coordinator.job == nil {
            self.sendToCoordinator(coordinator, beat)
        }
    }
}
