import Logging

// Time: the heartbeat tick.
extension BrokerMachine {
    /// Every heartbeat interval: kept results and finished jobs past their time are forgotten (durable
    /// mode), peers that went silent are lost (their work requeued or dropped), leases past their
    /// task's deadline expire, and every peer gets a HEARTBEAT.
    package mutating func tick(now: ContinuousClock.Instant) {
        guard self.standby == nil else { return }  // a standby holds nothing to expire or beat to
        if self.durable {
            self.pipeline.expireResults(now: now)
            self.expireJobs(now: now)
        }
        self.apply(self.state.tick(now: now), now: now)
        if !self.deadlines.isEmpty {
            for (id, lease) in self.deadlines.expire(now: now) {
                let actions = self.state.expireLease(id, worker: lease.worker, attempt: lease.attempt)
                if !actions.isEmpty {
                    self.logger.warning(
                        "lease expired: no result by the task's deadline",
                        metadata: ["task.id": "\(id)", "worker.id": "\(lease.worker)", "attempt": "\(lease.attempt)"]
                    )
                }
                self.apply(actions, now: now)
            }
        }
        let beat = self.heartbeat
        for worker in self.state.workers.keys { self.emit(.toWorker(worker, beat)) }
        for coordinator in self.state.coordinators.keys where coordinator.job == nil {
            self.emit(.toCoordinator(coordinator, beat))
        }
    }
}
