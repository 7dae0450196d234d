/// Units the protocol, the logs and the reports need (one place for each conversion).
extension Duration {
    /// Whole milliseconds, rounded down, never negative.
    package var milliseconds: Int64 {
        let (seconds, attoseconds) = self.components
        return max(0, seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }

    /// Whole microseconds, rounded down, never negative.
    package var microseconds: Int64 {
        let (seconds, attoseconds) = self.components
        return max(0, seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    }

    /// Seconds as a Double.
    package var seconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The whole duration in nanoseconds (saturating).
    package var nanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        return product.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }
}
