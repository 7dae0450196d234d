import Foundation
import SkyNet
import SkyNetCore

struct BenchReport {
    let workload: String
    let run: JobRun
    /// Start-up until the workers were registered (not timed in wall_s).
    var setup: Duration
    var settings: [String: any Sendable] = [:]
    var extra: [String: any Sendable] = [:]
    /// The workload counts accepted tasks, not results.
    var countsAccepted = false

    /// The run's latencies in nanoseconds, sorted once. Each percentile sorted the `Duration`s
    /// again, every comparison a call (`Duration.<`): ~1,000 instructions a round trip of `skynet
    /// bench latency` as `make instructions` counts it (the whole process, and a sort of n costs
    /// more than n times a sort of one, so it does not cancel out).
    private let sortedNanoseconds: [Int64]

    init(workload: String, run: JobRun, setup: Duration) {
        self.workload = workload
        self.run = run
        self.setup = setup
        self.sortedNanoseconds = run.latencies.map(\.nanoseconds).sorted()
    }

    var failedRun: Bool { !self.countsAccepted && self.run.summary.completed != self.run.summary.tasks }

    /// The latency at or below which a fraction `p` of the round trips fell, in microseconds.
    func percentile(_ p: Double) -> Double {
        let sorted = self.sortedNanoseconds
        guard !sorted.isEmpty else { return 0 }
        let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
        return Double(sorted[max(0, index)]) / 1000
    }

    var fields: [String: Any] {
        let summary = self.run.summary
        var fields: [String: Any] = [
            "workload": self.workload,
            "wall_s": rounded(self.run.wall.seconds),
            "tasks": summary.tasks,
            "completed": summary.completed,
            "failed": summary.failed,
            "tasks_per_s": rounded(Double(summary.tasks) / max(self.run.wall.seconds, 1e-9)),
            "p50_us": rounded(self.percentile(0.50)),
            "p99_us": rounded(self.percentile(0.99)),
            "setup_s": rounded(self.setup.seconds),
            "settings": self.settings.mapValues(jsonValue),
        ]
        for (key, value) in self.extra { fields[key] = jsonValue(value) }
        return fields
    }

    func json() -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: self.fields, options: [.sortedKeys]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }

    func human() -> String {
        let fields = self.fields
        var lines = [
            "\(self.workload): \(fields["tasks"]!) tasks in \(fields["wall_s"]!) s, \(fields["tasks_per_s"]!) tasks/s"
        ]
        if !self.run.latencies.isEmpty {
            lines.append("  latency p50 \(fields["p50_us"]!) µs, p99 \(fields["p99_us"]!) µs")
        }
        for key in self.extra.keys.sorted() { lines.append("  \(key): \(fields[key]!)") }
        lines.append("  setup \(fields["setup_s"]!) s; settings \(self.settings.mapValues(jsonValue))")
        return lines.joined(separator: "\n")
    }
}

private func jsonValue(_ value: any Sendable) -> Any {
    switch value {
    case let value as Double: return rounded(value)
    case let value as [Double]: return value.map(rounded)
    default: return value
    }
}

private func rounded(_ value: Double) -> Double {
    guard value.isFinite else { return 0 }
    return (value * 1000).rounded() / 1000
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
