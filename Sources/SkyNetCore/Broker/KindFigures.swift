/// Durations counted in fixed buckets, as a Prometheus histogram keeps them: the broker adds one
/// observation with a few compares and increments (no lock, no allocation), and the HTTP endpoint
/// writes the cumulative form.
public struct LatencyHistogram: Sendable, Codable, Equatable {
    /// The buckets' upper bounds in seconds, ascending; one more bucket (+Inf) follows the last.
    /// From half a millisecond (a no-op's round trip) to an hour.
    public static let bounds: [Double] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
    ]
    /// The bucket of a duration in microseconds: the first whose bound is at or above it, or the
    /// last (+Inf). The bounds are constants here, in microseconds (a test holds them equal to
    /// ``bounds``): walking an array of them cost the broker a lazy global's check, a retain, a
    /// release and a bounds check per compare, ~55 instructions an observation, two a task.
    package static func bucket(microseconds value: UInt64) -> Int {
        switch value {
        case ...500: 0
        case ...1_000: 1
        case ...2_500: 2
        case ...5_000: 3
        case ...10_000: 4
        case ...25_000: 5
        case ...50_000: 6
        case ...100_000: 7
        case ...250_000: 8
        case ...500_000: 9
        case ...1_000_000: 10
        case ...2_500_000: 11
        case ...5_000_000: 12
        case ...10_000_000: 13
        case ...30_000_000: 14
        case ...60_000_000: 15
        case ...300_000_000: 16
        case ...900_000_000: 17
        case ...3_600_000_000: 18
        default: 19
        }
    }

    /// Observations per bucket (not cumulative): `bounds.count + 1` entries, the last for +Inf.
    public private(set) var buckets: [UInt64]
    /// The sum of all observations, in microseconds.
    public private(set) var sumMicroseconds: UInt64 = 0
    /// How many observations.
    public private(set) var count: UInt64 = 0

    public init() { self.buckets = Array(repeating: 0, count: Self.bounds.count + 1) }

    /// Counts one duration.
    package mutating func record(microseconds value: UInt64) {
        self.buckets[Self.bucket(microseconds: value)] &+= 1
        self.sumMicroseconds &+= value
        self.count &+= 1
    }

    /// The sum in seconds.
    public var sumSeconds: Double { Double(self.sumMicroseconds) / 1_000_000 }

    /// Observations at or under each bound, then the total (+Inf): Prometheus's `_bucket` series.
    public var cumulative: [UInt64] {
        var running: UInt64 = 0
        return self.buckets.map {
            running &+= $0
            return running
        }
    }

    /// The smallest bound under which at least `fraction` of the observations lie (nil when empty;
    /// +Inf as `.infinity`): a quantile as coarse as the buckets.
    public func quantile(_ fraction: Double) -> Double? {
        guard self.count > 0 else { return nil }
        let wanted = UInt64((Double(self.count) * fraction).rounded(.up))
        for (index, total) in self.cumulative.enumerated() where total >= max(wanted, 1) {
            return index < Self.bounds.count ? Self.bounds[index] : .infinity
        }
        return .infinity
    }

    package enum CodingKeys: String, CodingKey {
        case buckets, count
        case sumMicroseconds
    }
}

extension BrokerStatus {
    /// What the broker knows of one task kind: its queue, and how long its tasks waited and ran.
    public struct Kind: Sendable, Codable, Equatable {
        /// Tasks of the kind queued now.
        public var queued: Int
        /// How long the oldest of them has been queued (since it was submitted, or queued again),
        /// in seconds; 0 with none queued.
        public var oldestQueuedSeconds: Double
        /// From queued to sent to a worker (whole milliseconds), for every dispatch since the broker
        /// started.
        public var queueWait: LatencyHistogram
        /// The scan's own time as its worker measured it, for every live attempt's RESULT but a
        /// cancelled one.
        public var runTime: LatencyHistogram

        package enum CodingKeys: String, CodingKey {
            case queued
            case oldestQueuedSeconds
            case queueWait
            case runTime
        }
    }
}

/// The broker's running figures for one kind (kept for the broker's lifetime, unlike its queue,
/// which goes when it empties): a class, so the queue and the state update it in place.
package final class KindFigures {
    #if DEBUG
    package var queueWait = LatencyHistogram()
    #else
    // Release builds skip the dynamic exclusivity check of the properties marked so here; debug
    // builds (every test, the fuzzer) keep it. Why each is safe: docs/DESIGN.md §3, "Unchecked
    // exclusivity", and the line below.
    // Unchecked: read and recorded in place, by a method that touches nothing else.
    @exclusivity(unchecked) package var queueWait = LatencyHistogram()
    #endif
    #if DEBUG
    package var runTime = LatencyHistogram()
    #else
    // Unchecked: as `queueWait`.
    @exclusivity(unchecked) package var runTime = LatencyHistogram()
    #endif
}
