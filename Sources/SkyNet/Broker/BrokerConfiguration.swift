import SkyNetCore

/// How a ``Broker`` listens and keeps time.
public struct BrokerConfiguration: Sendable {
    /// Where coordinators connect (a ROUTER), default `tcp://*:5555`.
    public var frontend: String
    /// Where workers connect (a ROUTER), default `tcp://*:5556`.
    public var backend: String
    /// Heartbeats to and expiry of workers and coordinators (1 s, dead after 3 missed).
    public var heartbeat: Heartbeat
    /// Most tasks queued at once; a SUBMIT beyond it is REJECTED with "queue full" (default 10 million).
    public var maxQueuedTasks: Int
    /// Durable mode: the journal file (nil: tasks live in memory only). SUBMIT is on disk before
    /// ACCEPTED, a RESULT before it is forwarded; a restart on the same file queues accepted tasks
    /// again and keeps unclaimed results (DESIGN.md §8).
    public var journalPath: String?
    /// The journal is compacted once it is this big and at least twice its last compacted size
    /// (default 64 MiB).
    public var compactionBytes: Int
    /// How long coordinators of recovered tasks have to reconnect after a restart, and how long a
    /// result that could not be delivered is kept for its coordinator (default 60 s).
    public var recoveryGrace: Duration
    /// On graceful shutdown (SIGTERM), how long the broker waits for results of tasks already running
    /// on workers before it stops (default 10 s). It takes no new tasks and dispatches none meanwhile.
    public var shutdownGrace: Duration
    /// How long a finished detached job's results are kept after its last result (default 24 h).
    public var jobRetention: Duration
    /// Most live tasks (queued or running) one coordinator may have at the broker; a SUBMIT beyond
    /// it is REJECTED with the reason (default: no limit but ``maxQueuedTasks``).
    public var maxQueuedPerCoordinator: Int
    /// Most workers registered at once; another is told the broker is at its limit (default 10,000).
    public var maxWorkers: Int
    /// Most coordinators connected at once; another is told the broker is at its limit
    /// (default 10,000).
    public var maxCoordinators: Int
    /// CURVE on both ports, with an allowlist per port (nil: plain text, for loopback and trusted
    /// networks only; `skynet broker` refuses a non-loopback address without it unless `--insecure`).
    public var security: BrokerSecurity?
    /// Lend a worker whose recent tasks ran under 5 ms on average half as many tasks again as its
    /// slots (rounded up; while they run under 50 µs, what runs in 400 µs a slot: up to 32 a slot,
    /// 4,096 in all), so that a slot that frees up starts the next task at once instead of waiting
    /// a round trip to the broker for it; stop when they average over 10 ms (default true).
    /// A lent task waits in the worker for a slot (that wait counts toward its timeout) and is not
    /// there for another worker meanwhile: when long tasks follow short ones, up to that half of
    /// them (after tasks under 50 µs, up to 32 a slot) wait behind a long one, once. `skynet broker --prefetch off` turns it off.
    public var prefetchShortTasks = true

    /// A configuration; every parameter has the default its property describes.
    public init(
        frontend: String = "tcp://*:5555",
        backend: String = "tcp://*:5556",
        heartbeat: Heartbeat = Heartbeat(),
        maxQueuedTasks: Int = 10_000_000,
        journalPath: String? = nil,
        compactionBytes: Int = 64 << 20,
        recoveryGrace: Duration = .seconds(60),
        shutdownGrace: Duration = .seconds(10),
        jobRetention: Duration = .seconds(86_400),
        maxQueuedPerCoordinator: Int = .max,
        maxWorkers: Int = 10_000,
        maxCoordinators: Int = 10_000,
        security: BrokerSecurity? = nil
    ) {
        self.maxQueuedPerCoordinator = maxQueuedPerCoordinator
        self.maxWorkers = maxWorkers
        self.maxCoordinators = maxCoordinators
        self.frontend = frontend
        self.backend = backend
        self.heartbeat = heartbeat
        self.maxQueuedTasks = maxQueuedTasks
        self.journalPath = journalPath
        self.compactionBytes = compactionBytes
        self.recoveryGrace = recoveryGrace
        self.shutdownGrace = shutdownGrace
        self.jobRetention = jobRetention
        self.security = security
    }

    /// What the broker's rules need of this configuration.
    /// HA mode (DESIGN.md §8b): this broker is a member of a group on etcd, and etcd is its journal
    /// (nil: a broker on its own, with ``journalPath`` or in memory). Exclusive with ``journalPath``.
    public var group: BrokerGroup?

    var rules: BrokerRules {
        var rules = BrokerRules(
            heartbeat: self.heartbeat,
            maxQueuedTasks: self.maxQueuedTasks,
            maxQueuedPerCoordinator: self.maxQueuedPerCoordinator,
            maxWorkers: self.maxWorkers,
            maxCoordinators: self.maxCoordinators,
            durable: self.journalPath != nil || self.group != nil,
            recoveryGrace: self.recoveryGrace,
            jobRetention: self.jobRetention
        )
        rules.prefetchesShortTasks = self.prefetchShortTasks
        if self.group != nil {
            rules.maxRecordBytes = EtcdJournalLayout.maxRecordBytes
            rules.forgetsDelivered = true
        }
        return rules
    }
}

/// A broker's membership of an HA group on etcd (DESIGN.md §8b): where etcd is, which group, and
/// where its peers reach this member when it leads.
public struct BrokerGroup: Sendable, Equatable {
    /// etcd's members, `http://host:port` (its client port, 2379 by default).
    public var etcd: [String]
    /// The group's name: several pools can share one etcd (default `skynet`).
    public var cluster: String
    /// This member's frontend endpoint as coordinators reach it (what a standby tells them).
    public var advertisedFrontend: String
    /// This member's backend endpoint as workers reach it.
    public var advertisedBackend: String
    /// The leader key's lease: a leader that cannot renew it stops within two thirds of it, and a
    /// standby takes over once it has expired (default 5 s; at least 2 s).
    public var leaseTTL: Duration
    /// TLS to etcd (with `https://` endpoints): the CA, and a client certificate.
    public var tls: EtcdTLS?

    public init(
        etcd: [String],
        cluster: String = "skynet",
        advertisedFrontend: String,
        advertisedBackend: String,
        leaseTTL: Duration = .seconds(5),
        tls: EtcdTLS? = nil
    ) {
        self.tls = tls
        self.etcd = etcd
        self.cluster = cluster
        self.advertisedFrontend = advertisedFrontend
        self.advertisedBackend = advertisedBackend
        self.leaseTTL = leaseTTL
    }
}
