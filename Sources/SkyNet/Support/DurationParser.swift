/// Parses durations the CLI and task files accept: `250ms`, `1s`, `1.5s`, `2m`, `1h`, `500us`, `0`.
public enum DurationParser {
    /// - Returns: the duration, or nil when `text` is not one (negative values are not durations).
    public static func parse(_ text: String) -> Duration? {
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
    public static func format(_ duration: Duration) -> String {
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
}

extension String {
    func trimmingSpaces() -> String {
        var slice = Substring(self)
        while slice.first?.isWhitespace == true { slice = slice.dropFirst() }
        while slice.last?.isWhitespace == true { slice = slice.dropLast() }
        return String(slice)
    }
}
