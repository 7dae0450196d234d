/// What the coordinator does when an attempt fails (the scanner threw, timed out, or its worker was
/// lost on the last attempt the broker would make).
///
/// - ``local(maxAttempts:)`` (the default, as in the book): re-run it on the coordinator's own
///   ScanSystem.
/// - ``remote(maxAttempts:)``: submit it to the broker again.
/// - ``none``: report the failure as final.
///
/// `maxAttempts` counts every attempt, remote and local, the first included (default 3). The broker
/// also uses it to bound requeues after lost workers.
///
/// Between a failed attempt and its retry the coordinator waits a ``RetryBackoff``: exponential with
/// full jitter, at most 10 ms before the 2nd attempt, 20 ms before the 3rd, doubling up to 5 s, each
/// delay drawn uniformly from zero to that bound (0–10 ms, 0–20 ms, …). The jitter spreads retries of
/// tasks that failed together (a flaky service, a lost worker) so they do not all come back at once.
/// A worker lost mid-task is different: the broker requeues its tasks at once, with no backoff.
public struct RetryPolicy: Sendable, Equatable, CustomStringConvertible {
    public enum Placement: String, Sendable, CaseIterable {
        case local, remote, none
    }

    public var placement: Placement
    public var maxAttempts: Int
    public var backoff: RetryBackoff

    public init(placement: Placement, maxAttempts: Int, backoff: RetryBackoff = RetryBackoff()) {
        self.placement = placement
        self.maxAttempts = max(1, maxAttempts)
        self.backoff = backoff
    }

    public static func local(maxAttempts: Int = 3) -> RetryPolicy {
        RetryPolicy(placement: .local, maxAttempts: maxAttempts)
    }
    public static func remote(maxAttempts: Int = 3) -> RetryPolicy {
        RetryPolicy(placement: .remote, maxAttempts: maxAttempts)
    }
    /// No retries by the coordinator (the broker still requeues tasks of lost workers, within `maxAttempts`).
    public static func none(maxAttempts: Int = 3) -> RetryPolicy {
        RetryPolicy(placement: .none, maxAttempts: maxAttempts)
    }

    public var description: String {
        let backoff =
            self.backoff.initial > .zero
            ? ", backoff \(DurationParser.format(self.backoff.initial)) doubling to \(DurationParser.format(self.backoff.maximum))"
            : ""
        return "\(self.placement.rawValue), at most \(self.maxAttempts) attempts\(backoff)"
    }
}

/// The wait before a retry: exponential, capped, with jitter.
///
/// The nominal delay before attempt `n` (n ≥ 2) is `min(maximum, initial × 2^(n−2))`; the actual
/// delay is drawn uniformly from [0, nominal] ("full jitter", as in gRPC's retry design and AWS's
/// analysis of backoff: for the same bounds it spreads retries that failed at the same moment over
/// twice the window of [nominal/2, nominal], and waits half as long on average).
public struct RetryBackoff: Sendable, Equatable {
    /// The nominal (longest) delay before the 2nd attempt (default 10 ms: short tasks retry soon, and
    /// more attempts wait longer). Zero disables backoff.
    public var initial: Duration
    /// The largest nominal delay (default 5 s).
    public var maximum: Duration

    public init(initial: Duration = .milliseconds(10), maximum: Duration = .seconds(5)) {
        self.initial = max(.zero, initial)
        self.maximum = max(self.initial, maximum)
    }

    /// Retries start at once.
    public static let none = RetryBackoff(initial: .zero, maximum: .zero)

    /// The nominal (un-jittered) delay before `attempt`.
    public func nominal(before attempt: UInt32) -> Duration {
        guard attempt >= 2, self.initial > .zero else { return .zero }
        let doublings = min(Int(attempt) - 2, 40)
        let initialNanos = Double(self.initial.nanoseconds)
        let nanos = min(Double(self.maximum.nanoseconds), initialNanos * Double(1 << UInt64(doublings)))
        return .nanoseconds(Int64(nanos))
    }

    /// The delay before `attempt`, jittered into [0, nominal].
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

extension Duration {
    /// The whole duration in nanoseconds (saturating).
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        return product.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }
}
