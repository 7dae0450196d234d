/// Units the protocol, the logs and the reports need (one place for each conversion).
extension Duration {
    /// Whole milliseconds, rounded down, never negative.
    package var milliseconds: Int64 { max(0, self.whole(1_000_000_000_000_000)) }

    /// Whole microseconds, rounded down, never negative.
    package var microseconds: Int64 { max(0, self.whole(1_000_000_000_000)) }

    /// Seconds as a Double.
    package var seconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The whole duration in nanoseconds (saturating).
    package var nanoseconds: Int64 { self.whole(1_000_000_000) }

    /// The duration in units of `attosecondsPerUnit`, rounded toward zero, saturating. Under about
    /// 9 s (attoseconds that fit in 64 bits) it is one 64-bit division, where `components` divides
    /// 128 bits (~180 instructions: `skynet submit` converted each sector task's work this way).
    private func whole(_ attosecondsPerUnit: Int64) -> Int64 {
        let attoseconds = self.attoseconds
        if let small = Int64(exactly: attoseconds) { return small / attosecondsPerUnit }
        return Int64(clamping: attoseconds / Int128(attosecondsPerUnit))
    }
}
