/// Application heartbeats: how often peers say they are alive, and how many missed intervals make
/// one dead.
///
/// The defaults follow the Paranoid Pirate pattern: every 1 s, dead after 3 missed (3 s of silence).
/// Any message counts as a heartbeat. ZMTP heartbeats on the sockets close dead TCP connections too,
/// but only these catch a hung process.
public struct Heartbeat: Sendable, Equatable {
    /// Time between heartbeats (default 1 s).
    public var interval: Duration
    /// Missed intervals before a peer is declared dead (default 3).
    public var liveness: Int

    /// A heartbeat (1 s, liveness 3 by default).
    public init(interval: Duration = .seconds(1), liveness: Int = 3) {
        self.interval = interval
        self.liveness = liveness
    }

    /// Silence after which a peer is dead: `interval × liveness`.
    public var expiry: Duration { self.interval * self.liveness }

    package var intervalMilliseconds: UInt32 { UInt32(clamping: self.interval.milliseconds) }

    /// The intervals the protocol allows, in milliseconds: a worker's READY outside it is refused, the
    /// command line refuses `--heartbeat` outside it, and a client takes a broker's longer interval
    /// as the longest (it would otherwise wait days before calling its broker lost).
    package static let allowedMilliseconds: ClosedRange<UInt32> = 50...60_000

    /// Why `interval` cannot be a heartbeat interval, or nil when it can.
    package static func problem(with interval: Duration) -> String? {
        let milliseconds = interval.milliseconds
        if milliseconds < Int64(Self.allowedMilliseconds.lowerBound) { return "--heartbeat must be at least 50ms" }
        if milliseconds > Int64(Self.allowedMilliseconds.upperBound) { return "--heartbeat must be at most 60s" }
        return nil
    }
}
