/// What the broker's rules depend on (``BrokerMachine``): the heartbeat, the limits, the mode and
/// how long things are kept. `BrokerConfiguration` (endpoints, the journal's path, CURVE) makes one.
package struct BrokerRules: Sendable {
    /// The broker's heartbeat interval and liveness.
    package var heartbeat = Heartbeat()
    /// Most tasks queued at once; a SUBMIT beyond it is REJECTED.
    package var maxQueuedTasks = 10_000_000
    /// Most live tasks one coordinator may have here.
    package var maxQueuedPerCoordinator = Int.max
    package var maxWorkers = 10_000
    package var maxCoordinators = 10_000
    /// A journal backs the broker: ACCEPTED means on disk, detached jobs are kept.
    package var durable = false
    /// How long a coordinator known only from the journal has to come back, and an undeliverable
    /// result is kept.
    package var recoveryGrace: Duration = .seconds(60)
    /// How long a finished detached job is kept.
    package var jobRetention: Duration = .seconds(86_400)
    /// The largest task (kind, input and options) or result the journal can hold, when it has a
    /// limit (etcd's: ``EtcdJournalLayout/maxRecordBytes``); a larger SUBMIT is REJECTED and a larger
    /// result is stored as a failure that says why.
    package var maxRecordBytes = Int.max
    /// The journal keeps what it is told until it is told to forget it (etcd's keys): a result is
    /// forgotten once it has been sent.
    package var forgetsDelivered = false
    /// Lend a worker whose tasks are short a few beyond its slots (``ShortTaskPrefetch``).
    package var prefetchesShortTasks = true

    package init(
        heartbeat: Heartbeat = Heartbeat(),
        maxQueuedTasks: Int = 10_000_000,
        maxQueuedPerCoordinator: Int = .max,
        maxWorkers: Int = 10_000,
        maxCoordinators: Int = 10_000,
        durable: Bool = false,
        recoveryGrace: Duration = .seconds(60),
        jobRetention: Duration = .seconds(86_400)
    ) {
        self.heartbeat = heartbeat
        self.maxQueuedTasks = maxQueuedTasks
        self.maxQueuedPerCoordinator = maxQueuedPerCoordinator
        self.maxWorkers = maxWorkers
        self.maxCoordinators = maxCoordinators
        self.durable = durable
        self.recoveryGrace = recoveryGrace
        self.jobRetention = jobRetention
    }
}
