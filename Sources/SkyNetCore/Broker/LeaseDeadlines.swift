/// Deadlines of leases whose tasks have a timeout: when the worker has not answered by the task's
/// timeout plus the heartbeat expiry, the lease expires and ``BrokerState`` requeues the task (the
/// worker itself cancels a scan at its timeout; this covers a worker that says nothing). Pure: the
/// ``Broker`` gives it the time.
package struct LeaseDeadlines {
    package struct Lease: Equatable {
        package let worker: PeerID
        package let attempt: UInt32
        package let deadline: ContinuousClock.Instant
    }

    private var leases: [TaskID: Lease] = [:]

    package var isEmpty: Bool { self.leases.isEmpty }

    /// `id`'s attempt went to `worker` and must be answered by `deadline`.
    package mutating func leased(_ id: TaskID, to worker: PeerID, attempt: UInt32, deadline: ContinuousClock.Instant) {
        self.leases[id] = Lease(worker: worker, attempt: attempt, deadline: deadline)
    }

    /// A RESULT arrived: the deadline of that lease (the same worker and attempt) is gone.
    package mutating func answered(_ id: TaskID, by worker: PeerID, attempt: UInt32) {
        // Most tasks have no timeout: the common case costs no hashing.
        guard !self.leases.isEmpty, let lease = self.leases[id], lease.worker == worker, lease.attempt == attempt else {
            return
        }
        self.leases[id] = nil
    }

    /// Removes and returns the leases past their deadline at `now`, in task id order.
    package mutating func expire(now: ContinuousClock.Instant) -> [(id: TaskID, lease: Lease)] {
        let expired = self.leases.filter { $0.value.deadline <= now }.sorted(by: { $0.key < $1.key })
        for (id, _) in expired { self.leases[id] = nil }
        return expired.map { ($0.key, $0.value) }
    }
}
