/// Exponential backoff with jitter: each ``next()`` doubles the delay up to `maximum`, spread by up to
/// ±`jitter` (a fraction) so that many peers do not retry in lockstep. With `maxAttempts` set,
/// ``next()`` returns nil once they are used up.
///
/// Defaults (reconnecting to a broker): 100 ms, 200 ms, 400 ms, … capped at 5 s, ±20 %, unlimited.
public struct Backoff: Sendable {
    public var initial: Duration
    public var maximum: Duration
    public var jitter: Double
    public var maxAttempts: Int?
    private var attempts = 0

    public init(
        initial: Duration = .milliseconds(100),
        maximum: Duration = .seconds(5),
        jitter: Double = 0.2,
        maxAttempts: Int? = nil
    ) {
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.maxAttempts = maxAttempts
    }

    /// The next delay, or nil when the attempts are used up.
    public mutating func next() -> Duration? {
        if let maxAttempts, self.attempts >= maxAttempts { return nil }
        let base = min(self.initial * (1 << min(self.attempts, 30)), self.maximum)
        self.attempts += 1
        let spread = self.jitter > 0 ? Double.random(in: -self.jitter...self.jitter) : 0
        return base * (1 + spread)
    }

    /// Starts again from `initial` (after a success).
    public mutating func reset() { self.attempts = 0 }
}
