import SkyNetCore

/// Carries out ``Leadership``'s steps with an ``EtcdClient``: the I/O of the pure election. It runs
/// on the thread that owns the client; a wait step returns at once (the caller sleeps).
package enum LeadershipRunner {
    /// Does one step of `leadership` on `key` and reports its outcome to it.
    /// - Returns: the step done (a `.wait` means nothing was done: sleep until then).
    @discardableResult
    package static func step(
        _ leadership: inout Leadership,
        key: [UInt8],
        client: EtcdClient,
        now: () -> ContinuousClock.Instant = { .now }
    ) -> Leadership.Step {
        let step = leadership.next(now: now())
        let sentAt = now()
        do throws(EtcdError) {
            switch step {
            case .wait:
                break
            case .grantLease:
                let lease = try client.grantLease(ttlSeconds: Int64(leadership.ttl.components.seconds))
                leadership.leaseGranted(lease.id, sentAt: sentAt)
            case .campaign(let lease):
                let reply = try client.txn(
                    EtcdAPI.TxnRequest(
                        compare: [.createRevision(key: key, equals: 0)],
                        success: [.put(key: key, value: leadership.recordBytes, lease: lease)],
                        failure: [.range(key: key, rangeEnd: nil)]
                    )
                )
                let current = reply.ranges.first?.kvs.first
                leadership.campaigned(
                    won: reply.succeeded,
                    fence: reply.succeeded ? reply.header.revision : current?.createRevision ?? 0,
                    leader: current.flatMap { Leadership.record(from: $0.value) },
                    sentAt: sentAt
                )
            case .keepAlive(let lease):
                leadership.keptAlive(ttlSeconds: try client.keepAlive(lease: lease), sentAt: sentAt)
            }
        } catch {
            leadership.failed(now: now())
        }
        return step
    }
}
