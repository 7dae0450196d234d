/// The wait before trying again: exponential, capped, with jitter. One type for both waits in
/// SkyNet: a coordinator's before a failed task's next attempt (``RetryPolicy/backoff``: 10 ms
/// doubling to 5 s) and a worker's before it reconnects to a broker that went away
/// (``WorkerConfiguration/reconnect``: 100 ms doubling to 5 s).
///
/// The nominal delay before attempt `n` (n ≥ 2) is `min(maximum, initial × 2^(n−2))`; the actual
/// delay is drawn uniformly from [0, nominal] ("full jitter", as in gRPC's retry design and AWS's
/// analysis of backoff: for the same bounds it spreads retries that failed at the same moment over
/// twice the window of [nominal/2, nominal], and waits half as long on average).
public struct Backoff: Sendable, Equatable {
    /// The nominal (longest) delay before the 2nd attempt (default 10 ms: short tasks retry soon, and
    /// more attempts wait longer). Zero disables backoff.
    public var initial: Duration
    /// The largest nominal delay (default 5 s).
    public var maximum: Duration

    /// - Parameters:
    ///   - initial: the nominal delay before the 2nd attempt (clamped to zero or more).
    ///   - maximum: the largest nominal delay (at least `initial`).
    public init(initial: Duration = .milliseconds(10), maximum: Duration = .seconds(5)) {
        self.initial = max(.zero, initial)
        self.maximum = max(self.initial, maximum)
    }

    /// Retries start at once.
    public static let none = Backoff(initial: .zero, maximum: .zero)

    /// The nominal (un-jittered) delay before `attempt`.
    public func nominal(before attempt: UInt32) -> Duration {
        guard attempt >= 2, self.initial > .zero else { return .zero }
        let doublings = min(Int(attempt) - 2, 40)
        let initialNanos = Double(self.initial.nanoseconds)
        let nanos = min(Double(self.maximum.nanoseconds), initialNanos * Double(1 << UInt64(doublings)))
        return .nanoseconds(Int64(nanos))
    }

    /// The delay before `attempt`, jittered into [0, nominal].
    /// - Parameters:
    ///   - attempt: the attempt about to start (2 for the first retry).
    ///   - generator: the random numbers to draw the jitter from.
    public func delay(before attempt: UInt32, using generator: inout some RandomNumberGenerator) -> Duration {
        let nominal = self.nominal(before: attempt).nanoseconds
        guard nominal > 0 else { return .zero }
        return .nanoseconds(Int64.random(in: 0...nominal, using: &generator))
    }

    /// The delay before `attempt` with the system's random numbers.
    public func delay(before attempt: UInt32) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return self.delay(before: attempt, using: &generator)
    }
}
