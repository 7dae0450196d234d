/// What the coordinator does when an attempt fails (the scanner threw, timed out, or its worker was
/// lost on the last attempt the broker would make).
///
/// - ``local(maxAttempts:)`` (the default, as in the book): re-run it on the coordinator's own
///   ScanSystem.
/// - ``remote(maxAttempts:)``: submit it to the broker again.
/// - ``none``: report the failure as final.
///
/// `maxAttempts` counts every attempt, remote and local, the first included (default 3). The broker
/// also uses it to bound requeues after lost workers. Retries start at once: there is no backoff
/// between attempts yet.
public struct RetryPolicy: Sendable, Equatable, CustomStringConvertible {
    public enum Placement: String, Sendable, CaseIterable {
        case local, remote, none
    }

    public var placement: Placement
    public var maxAttempts: Int

    public init(placement: Placement, maxAttempts: Int) {
        self.placement = placement
        self.maxAttempts = max(1, maxAttempts)
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

    public var description: String { "\(self.placement.rawValue), at most \(self.maxAttempts) attempts" }
}
