/// What a client (a ``Coordinator`` or a ``DetachedJobClient``) knows of its broker's liveness: whether it
/// has answered since the connect, when it was last heard, and its epoch, which changes when the
/// broker restarts. Pure: the client gives it the time.
struct BrokerLiveness {
    /// Silence after which the broker counts as lost.
    let timeout: Duration
    /// The broker has answered since the connect.
    private(set) var answered = false
    private var lastHeard: ContinuousClock.Instant
    private var epoch: UInt32?

    init(timeout: Duration, now: ContinuousClock.Instant = .now) {
        self.timeout = timeout
        self.lastHeard = now
    }

    /// The connection was (re)made: silence counts from now.
    mutating func connected(now: ContinuousClock.Instant) { self.lastHeard = now }

    /// A message from the broker arrived.
    mutating func heard(now: ContinuousClock.Instant) {
        self.answered = true
        self.lastHeard = now
    }

    /// The broker's HEARTBEAT carried `epoch` (0 carries none).
    /// - Returns: true when it differs from the last one: a new broker process, which has lost what
    ///   the old one held in memory.
    mutating func heartbeat(epoch: UInt32) -> Bool {
        guard epoch != 0 else { return false }
        defer { self.epoch = epoch }
        return self.epoch.map { $0 != epoch } ?? false
    }

    /// The broker answered once and has been silent for longer than the timeout since.
    func isLost(now: ContinuousClock.Instant) -> Bool { self.answered && now - self.lastHeard > self.timeout }
}
