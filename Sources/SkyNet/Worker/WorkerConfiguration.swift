import SkyNetCore
/// How a ``Worker`` connects and behaves.
public struct WorkerConfiguration: Sendable {
    /// The broker's backend endpoint, default `tcp://127.0.0.1:5556`.
    public var broker: String
    /// The name results carry ("Completed: 9 by worker-b").
    public var name: String
    /// Scans run at once, default 4.
    public var slots: Int
    /// Tasks held beyond ``slots``, each waiting for a slot (first come, first served); default 0.
    /// The broker's credit for this worker is `slots + prefetch`, so a slot that frees up starts
    /// the next task at once instead of waiting a round trip to the broker for it: for tasks of a
    /// millisecond or so that round trip is a large part of each. The held tasks are leased like
    /// running ones (requeued if the worker is lost), and the time one waits for a slot counts
    /// toward its timeout.
    public var prefetch: Int
    /// Heartbeat interval and liveness (1 s, broker dead after 3 missed).
    public var heartbeat: Heartbeat
    /// On SIGTERM, how long to wait for running scans before cancelling them (default 30 s).
    public var drainTimeout: Duration
    /// Delay before re-creating the connection after the broker went away: up to 100 ms before the
    /// first reconnect, a bound doubling to 5 s, each wait drawn from [0, bound].
    public var reconnect: Backoff
    /// CURVE keys: this worker's pair and the broker's public key (nil: plain text).
    public var security: ClientSecurity?

    /// A configuration; every parameter has the default its property describes.
    public init(
        broker: String = "tcp://127.0.0.1:5556",
        name: String,
        slots: Int = 4,
        heartbeat: Heartbeat = Heartbeat(),
        drainTimeout: Duration = .seconds(30),
        reconnect: Backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(5)),
        security: ClientSecurity? = nil,
        prefetch: Int = 0
    ) {
        self.broker = broker
        self.name = name
        self.slots = slots
        self.heartbeat = heartbeat
        self.drainTimeout = drainTimeout
        self.reconnect = reconnect
        self.security = security
        self.prefetch = prefetch
    }
}
