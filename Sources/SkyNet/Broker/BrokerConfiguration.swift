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

    public init(
        frontend: String = "tcp://*:5555",
        backend: String = "tcp://*:5556",
        heartbeat: Heartbeat = Heartbeat(),
        maxQueuedTasks: Int = 10_000_000
    ) {
        self.frontend = frontend
        self.backend = backend
        self.heartbeat = heartbeat
        self.maxQueuedTasks = maxQueuedTasks
    }
}
