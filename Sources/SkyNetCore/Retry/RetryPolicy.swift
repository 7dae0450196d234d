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
/// Between a failed attempt and its retry the coordinator waits a ``Backoff``: exponential with
/// full jitter, at most 10 ms before the 2nd attempt, 20 ms before the 3rd, doubling up to 5 s, each
/// delay drawn uniformly from zero to that bound (0–10 ms, 0–20 ms, …). The jitter spreads retries of
/// tasks that failed together (a flaky service, a lost worker) so they do not all come back at once.
/// A worker lost mid-task is different: the broker requeues its tasks at once, with no backoff.
public struct RetryPolicy: Sendable, Equatable, CustomStringConvertible {
    /// Where a failed task's next attempt runs.
    public enum Placement: String, Sendable, CaseIterable {
        case local, remote, none
    }

    /// Where retries run.
    public var placement: Placement
    /// Attempts in all, the first included (at least 1).
    public var maxAttempts: Int
    /// The wait before each retry.
    public var backoff: Backoff

    /// A policy.
    public init(placement: Placement, maxAttempts: Int, backoff: Backoff = Backoff()) {
        self.placement = placement
        self.maxAttempts = max(1, maxAttempts)
        self.backoff = backoff
    }

    /// Retries on the coordinator's own ScanSystem (the book's way, and the default).
    public static func local(maxAttempts: Int = 3) -> RetryPolicy {
        RetryPolicy(placement: .local, maxAttempts: maxAttempts)
    }
    /// Retries sent to the broker again, to run on any worker.
    public static func remote(maxAttempts: Int = 3) -> RetryPolicy {
        RetryPolicy(placement: .remote, maxAttempts: maxAttempts)
    }
    /// No retries by the coordinator (the broker still requeues tasks of lost workers, within `maxAttempts`).
    public static func none(maxAttempts: Int = 3) -> RetryPolicy {
        RetryPolicy(placement: .none, maxAttempts: maxAttempts)
    }

    /// As the CLI prints it, e.g. `local, 3 attempts`.
    public var description: String {
        let backoff =
            self.backoff.initial > .zero
            ? ", backoff \(DurationParser.format(self.backoff.initial)) doubling to \(DurationParser.format(self.backoff.maximum))"
            : ""
        return "\(self.placement.rawValue), at most \(self.maxAttempts) attempts\(backoff)"
    }
}
