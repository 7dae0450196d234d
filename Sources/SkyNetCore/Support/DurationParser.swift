/// Parses durations the CLI and task files accept: `250ms`, `1s`, `1.5s`, `2m`, `1h`, `500us`, `0`.
package enum DurationParser {
    /// - Returns: the duration, or nil when `text` is not one (negative values are not durations).
    package static func parse(_ text: String) -> Duration? {
        let trimmed = text.trimmingSpaces()
        if trimmed == "0" { return .zero }
        let units: [(String, Double)] = [
            ("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("s", 1), ("m", 60), ("h", 3600),
        ]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count)
            guard !number.isEmpty, number.allSatisfy({ $0.isNumber || $0 == "." }),
                let value = Double(number), value.isFinite, value >= 0, value * scale <= 1e9
            else { return nil }
            return .nanoseconds(Int64((value * scale * 1e9).rounded()))
        }
        return nil
    }

    /// A short text form of a duration: `200us`, `1500us`, `250ms`, `1.5s`, `0ms` (what ``parse(_:)`` reads
    /// back; below a second and not whole milliseconds, whole microseconds).
    package static func format(_ duration: Duration) -> String {
        let ms = duration.milliseconds
        if ms < 1000 {
            guard duration != .milliseconds(ms) else { return "\(ms)ms" }
            let (_, attoseconds) = duration.components
            return "\(attoseconds / 1_000_000_000_000)us"
        }
        let seconds = duration.seconds
        guard seconds == seconds.rounded() else { return "\(seconds)s" }
        let whole = Int(seconds)
        if whole % 3600 == 0 { return "\(whole / 3600)h" }
        if whole % 60 == 0 { return "\(whole / 60)m" }
        return "\(whole)s"
    }

    /// A duration for people to read, rounded: whole microseconds below a millisecond, tenths below
    /// 10 ms and below 10 s, whole milliseconds or seconds otherwise (`850us`, `4.9ms`, `120ms`,
    /// `1.5s`, `42s`, `0ms`). A jittered retry wait is rarely whole milliseconds, and ``format(_:)``
    /// would print it to the microsecond. ``parse(_:)`` reads it back, rounded.
    package static func describe(_ duration: Duration) -> String {
        let nanos = max(duration.nanoseconds, 0)
        func oneDecimal(_ value: Double, _ unit: String) -> String {
            let tenths = (value * 10).rounded()
            return tenths.truncatingRemainder(dividingBy: 10) == 0
                ? "\(Int(tenths / 10))\(unit)" : "\(tenths / 10)\(unit)"
        }
        switch nanos {
        case 0: return "0ms"
        case ..<999_500: return "\(max(1, Int((Double(nanos) / 1e3).rounded())))us"
        case ..<9_950_000: return oneDecimal(Double(nanos) / 1e6, "ms")
        case ..<999_500_000: return "\(Int((Double(nanos) / 1e6).rounded()))ms"
        case ..<9_950_000_000: return oneDecimal(Double(nanos) / 1e9, "s")
        default: return "\(Int((Double(nanos) / 1e9).rounded()))s"
        }
    }
}

extension String {
    package func trimmingSpaces() -> String {
        var slice = Substring(self)
        while slice.first?.isWhitespace == true { slice = slice.dropFirst() }
        while slice.last?.isWhitespace == true { slice = slice.dropLast() }
        return String(slice)
    }
}
