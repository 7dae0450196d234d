/// What a client of the broker (a worker, a coordinator or a detached-job client) knows of its
/// broker's liveness: whether it has answered since the connect, when it was last heard, its heartbeat
/// interval, and its epoch, which changes when the broker restarts. ``hear(_:now:)`` reads every
/// message from the broker the same way for all three: the client only says what it does about it.
/// Pure: the client gives it the time.
package struct BrokerLiveness {
    /// Silence after which the broker counts as lost: the client's own timeout, or longer when the
    /// broker said it heartbeats more slowly (``silence(own:brokerIntervalMilliseconds:)``).
    package var timeout: Duration {
        Self.silence(own: self.ownTimeout, brokerIntervalMilliseconds: self.brokerInterval)
    }
    private let ownTimeout: Duration
    /// The broker's heartbeat interval, from its HEARTBEAT (0 until one says).
    private var brokerInterval: UInt32 = 0
    /// The broker has answered since the connect.
    package private(set) var answered = false
    private var lastHeard: ContinuousClock.Instant
    private var epoch: UInt32?

    package init(timeout: Duration, now: ContinuousClock.Instant = .now) {
        self.ownTimeout = timeout
        self.lastHeard = now
    }

    /// The connection was (re)made: silence counts from now, and the broker has not answered on it.
    package mutating func connected(now: ContinuousClock.Instant) {
        self.lastHeard = now
        self.answered = false
    }

    /// What a connection-level message from the broker means for its client.
    package enum Signal: Equatable {
        /// The broker answered for the first time on this connection (its first HEARTBEAT); with
        /// `restarted`, it is a new broker process since the last connection.
        case answered(restarted: Bool)
        /// A later HEARTBEAT from a new broker process: what the old one held in memory is gone.
        case restarted
        /// DISCONNECT "unknown peer": the broker does not know this client (it restarted, or expired
        /// it after a silence); the client registers or sends its unfinished work again.
        case forgotten(String)
        /// DISCONNECT for a wrong port, a revoked key or a limit: retrying cannot mend it.
        case refused(String)
        /// DISCONNECT for any other reason (the broker stops, a version or protocol error).
        case leaving(DisconnectReason, String)
        /// DISCONNECT "not the leader" from a member of an HA group, with the leader's endpoint when
        /// it knows (else empty). The member is alive, but it has not answered as a broker.
        case notLeader(hint: String)
    }

    /// A message from the broker arrived: it was heard; a HEARTBEAT's epoch and interval are taken in.
    /// - Returns: what it means for the connection (nil for a message that is the client's own
    ///   business: a TASK, a RESULT, a reply, a HEARTBEAT like the last).
    package mutating func hear(_ message: WireMessage, now: ContinuousClock.Instant) -> Signal? {
        if case .disconnect(.notLeader, let hint) = message {
            self.lastHeard = now
            return .notLeader(hint: hint)
        }
        let first = !self.answered
        self.heard(now: now)
        switch message {
        case .heartbeat(let epoch, let interval):
            let restarted = self.heartbeat(epoch: epoch, intervalMilliseconds: interval)
            if first { return .answered(restarted: restarted) }
            return restarted ? .restarted : nil
        case .disconnect(.unknownPeer, let text):
            return .forgotten(text)
        case .disconnect(.wrongPort, let text), .disconnect(.revoked, let text), .disconnect(.limit, let text):
            return .refused(text)
        case .disconnect(let reason, let text):
            return .leaving(reason, text)
        default:
            return nil
        }
    }

    /// A message from the broker arrived.
    package mutating func heard(now: ContinuousClock.Instant) {
        self.answered = true
        self.lastHeard = now
    }

    /// How long a peer waits in silence before it calls its broker lost: its own limit, but never
    /// less than ``missedBeats`` of the broker's own heartbeats (a broker started with `--heartbeat
    /// 5s` is not lost after 3 s). The one rule for workers, coordinators and job clients.
    package static func silence(own: Duration, brokerIntervalMilliseconds: UInt32) -> Duration {
        max(own, .milliseconds(Int(brokerIntervalMilliseconds)) * Self.missedBeats)
    }

    /// The broker's heartbeats a peer may miss before it calls the broker lost (one more than the
    /// broker's own liveness, for the time a heartbeat spends in queues).
    package static let missedBeats = 4

    /// The broker's HEARTBEAT carried `epoch` (0 carries none) and its interval (0 from old brokers).
    /// - Returns: true when the epoch differs from the last one: a new broker process, which has lost
    ///   what the old one held in memory.
    package mutating func heartbeat(epoch: UInt32, intervalMilliseconds: UInt32 = 0) -> Bool {
        if intervalMilliseconds > 0 {
            self.brokerInterval = min(intervalMilliseconds, Heartbeat.allowedMilliseconds.upperBound)
        }
        guard epoch != 0 else { return false }
        defer { self.epoch = epoch }
        return self.epoch.map { $0 != epoch } ?? false
    }

    /// The broker answered once and has been silent for longer than the timeout since.
    package func isLost(now: ContinuousClock.Instant) -> Bool { self.answered && now - self.lastHeard > self.timeout }

    /// Silence since the broker was last heard (or since the connect).
    package func silent(now: ContinuousClock.Instant) -> Duration { now - self.lastHeard }
}

extension WireMessage {
    /// A STATUS reply: a standby of an HA group answers it too, so it says nothing of who leads.
    package var isStatusReply: Bool {
        if case .statusReply = self { true } else { false }
    }
}
