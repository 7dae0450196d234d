extension Duration {
    /// `nanoseconds` (a stopwatch's reading) as a duration.
    package init(stopwatchNanoseconds nanoseconds: UInt64) {
        self = .nanoseconds(Int64(clamping: nanoseconds))
    }
}

extension ResultMeta {
    /// What a RESULT says of the attempt that ran `nanoseconds` (a stopwatch's reading) in `slot`
    /// of `system`, with `busy` scans running then.
    package init(system: String, nanoseconds: UInt64, slot: Int, busy: Int) {
        self.init(
            system: system,
            durationMicroseconds: UInt32(clamping: nanoseconds / 1000),
            slot: UInt16(clamping: slot),
            busy: UInt16(clamping: busy)
        )
    }
}
