package import SkyNet
import Foundation
/// Turns a job's events into what `skynet submit` and `skynet demo` print.
///
/// Human format: one line per final result (`Completed: 9 by worker-b`), a line per retry or requeue,
/// and a summary. JSON format (`--json`): one object per final result,
/// `{"id","sector","status","attempts","system","result"}` (plus `"error"` when it failed), and a
/// last line `{"summary":{…}}`. The live progress line (scheduled, per second, completed) is for a
/// terminal only.
package struct JobReporter {
    package enum Format: Sendable {
        case human, json
    }

    package let format: Format
    /// The tasks in the job (growing while a streamed job reads its input).
    package var total: Int
    package private(set) var scheduled = 0
    package private(set) var finished = 0
    private var rate = 0.0
    private var rateSample: (at: ContinuousClock.Instant, finished: Int) = (.now, 0)

    package init(format: Format, total: Int) {
        self.format = format
        self.total = total
    }

    /// The lines (each ending in a newline) a batch of events prints on standard output.
    package mutating func render(_ batch: [CoordinatorEvent]) -> String {
        var out = ""
        for event in batch {
            switch event {
            case .accepted(let count):
                self.scheduled += count
            case .final(let result):
                self.finished += 1
                out += self.format == .json ? Self.json(result) : Self.human(result)
                out += "\n"
            case .retrying(let task, let attempt, let system, let reason, let placement, let delay):
                guard self.format == .human else { continue }
                let next = placement == .local ? "re-running locally" : "resubmitting"
                let wait = delay > .zero ? " in \(DurationParser.describe(delay))" : ""
                out +=
                    "Retrying: \(Self.label(task)) failed on \(system) (attempt \(attempt): \(reason)); \(next)\(wait)\n"
            case .requeued(let task, let attempt):
                guard self.format == .human else { continue }
                out += "Requeued: \(Self.label(task)), its worker was lost; attempt \(attempt)\n"
            case .brokerLost(let reason):
                guard self.format == .human else { continue }
                out += "Broker lost: \(reason); unfinished tasks go to the retry policy\n"
            case .cancelling(let reason):
                guard self.format == .human else { continue }
                out += "Cancelling: \(reason); cancelling queued and running tasks\n"
            case .resubmitted(let count, let reason):
                guard self.format == .human else { continue }
                out += "Resubmitted: \(reason); sent \(count) unfinished task\(count == 1 ? "" : "s") again\n"
            case .noWorker:
                continue  // JobRunner says it on standard error
            case .slowedDown(let reason):
                guard self.format == .human else { continue }
                out += "Slowed down: the broker has no room for more (\(reason)); the rest go as tasks finish\n"
            }
        }
        return out
    }

    /// What one final result prints, on standard output and standard error. An `exec` task prints
    /// its command's own output (as GNU parallel does: stdout, then stderr, when it ends), and a line
    /// on standard error when it did not complete or its output was cut; `--json` prints one object
    /// with `exit_code`, `signal`, `stdout`, `stderr` and `truncated`. Other kinds print a line.
    package mutating func output(_ result: FinalResult) -> (stdout: [UInt8], stderr: [UInt8]) {
        var stdout: [UInt8] = []
        let stderr = self.output(result, into: &stdout)
        return (stdout, stderr)
    }

    /// ``output(_:)`` with standard output's part appended to `stdout` (a buffer the caller writes
    /// once for many results); returns standard error's.
    package mutating func output(_ result: FinalResult, into stdout: inout [UInt8]) -> [UInt8] {
        self.finished += 1
        // The kind first: an initializer takes its argument owned, so ExecView(result) copies the
        // whole result even for a task that is not a command.
        guard result.task.isCommand, let view = ExecView(result) else {
            if self.format == .human {
                Self.appendHumanLine(result, to: &stdout)
            } else {
                Self.appendJSONLine(result, to: &stdout)
            }
            return []
        }
        if self.format == .json {
            stdout.append(contentsOf: (Self.json(result, view) + "\n").utf8)
            return []
        }
        var stderr: [UInt8] = []
        let name = "task \(view.sequence > 0 ? String(view.sequence) : result.task.id.description) (\(view.command))"
        if let output = view.output {
            stdout.append(contentsOf: output.stdout)
            stderr = output.stderr
            for (stream, kept, total) in [
                ("standard output", output.stdout.count, output.stdoutBytes),
                ("standard error", output.stderr.count, output.stderrBytes),
            ] where total > kept {
                stderr += Array(
                    "skynet: \(name): \(stream) was \(total) bytes; kept its first \(kept / 2) and last \(kept - kept / 2)\n"
                        .utf8
                )
            }
        }
        if result.status != .completed {
            let attempts = "\(result.attempts) attempt\(result.attempts == 1 ? "" : "s")"
            stderr += Array(
                "skynet: \(result.status.rawValue): \(name) after \(attempts), last on \(result.system): \(result.error ?? "")\n"
                    .utf8
            )
        }
        return stderr
    }

    static func json(_ result: FinalResult, _ view: ExecView) -> String {
        var out =
            "{\"id\":\"\(result.task.id)\",\"seq\":\(view.sequence),\"kind\":\"exec\",\"command\":"
            + Self.quote(view.command)
        out +=
            ",\"status\":\"\(result.status.rawValue)\",\"attempts\":\(result.attempts),\"system\":"
            + Self.quote(result.system)
        if let output = view.output {
            out += ",\"exit_code\":" + (output.signal == 0 ? String(output.exitCode) : "null")
            out += ",\"signal\":" + (output.signal == 0 ? "null" : String(output.signal))
            for (name, bytes) in [("stdout", output.stdout), ("stderr", output.stderr)] {
                if let text = String(validating: bytes, as: UTF8.self) {
                    out += ",\"\(name)\":" + Self.quote(text)
                } else {
                    out += ",\"\(name)\":null,\"\(name)_base64\":\"\(Data(bytes).base64EncodedString())\""
                }
            }
            out += ",\"truncated\":\(output.stdoutTruncated || output.stderrTruncated)"
            out += ",\"stdout_bytes\":\(output.stdoutBytes),\"stderr_bytes\":\(output.stderrBytes)"
            out += ",\"runtime_s\":\(Self.number(output.runtime.seconds))"
        } else {
            out += ",\"exit_code\":null,\"signal\":null,\"stdout\":\"\",\"stderr\":\"\",\"truncated\":false"
        }
        out += ",\"from_cache\":\(result.system == "cache")"
        if let error = result.error { out += ",\"error\":" + Self.quote(error) }
        return out + "}"
    }

    /// The progress line (scheduled, per second, completed) for a terminal, without a newline.
    package mutating func progressLine(now: ContinuousClock.Instant = .now) -> String {
        let elapsed = (now - self.rateSample.at).seconds
        if elapsed >= 0.5 {
            self.rate = Double(self.finished - self.rateSample.finished) / elapsed
            self.rateSample = (now, self.finished)
        }
        return "scheduled \(self.scheduled) | \(Int(self.rate.rounded()))/s | completed \(self.finished)/\(self.total)"
    }

    /// The closing summary: in JSON one line, whose `"dead_letter"` lists the failed tasks; for humans
    /// the dead-letter report (when a task failed) and then the summary line.
    package func summary(_ summary: JobSummary) -> String {
        switch self.format {
        case .json:
            let deadLetters = summary.deadLetters.map { result in
                "{\"id\":\"\(result.task.id)\",\"sector\":" + (result.task.sector.map(String.init) ?? "null")
                    + ",\"attempts\":\(result.attempts),\"system\":" + Self.quote(result.system)
                    + ",\"error\":" + Self.quote(result.error ?? "") + "}"
            }
            return
                "{\"summary\":{\"tasks\":\(summary.tasks),\"completed\":\(summary.completed),\"failed\":\(summary.failed),"
                + "\"cancelled\":\(summary.cancelled),\"retried\":\(summary.retried),\"retried_locally\":\(summary.retriedLocally),"
                + "\"requeued\":\(summary.requeued),\"duplicates\":\(summary.duplicates),"
                + "\"from_cache\":\(summary.fromCache),\"identical\":\(summary.identical),"
                + "\"not_recorded\":\(summary.notRecorded),"
                + "\"wall_s\":\(Self.number(summary.wall.seconds)),\"tasks_per_s\":\(Self.number(summary.tasksPerSecond)),"
                + "\"dead_letter\":[\(deadLetters.joined(separator: ","))]}}"
        case .human:
            var report = ""
            if !summary.deadLetters.isEmpty {
                let count = summary.deadLetters.count
                report += "Dead letters: \(count) task\(count == 1 ? "" : "s") failed every attempt\n"
                for result in summary.deadLetters {
                    report +=
                        "  \(Self.label(result.task)) (id \(result.task.id)): \(result.attempts) attempt\(result.attempts == 1 ? "" : "s"), "
                        + "last on \(result.system): \(result.error ?? "")\n"
                }
            }
            return report + "Summary: \(summary.tasks) tasks, \(summary.completed) completed, \(summary.failed) failed"
                + (summary.cancelled > 0 ? ", \(summary.cancelled) cancelled" : "")
                + (summary.fromCache > 0 ? ", \(summary.fromCache) from cache" : "")
                + (summary.identical > 0 ? ", \(summary.identical) identical to another task" : "")
                + (summary.notRecorded > 0 ? ", \(summary.notRecorded) not recorded" : "")
                + "; \(summary.retried) retried (\(summary.retriedLocally) locally), \(summary.requeued) requeued, "
                + "\(summary.duplicates) duplicates dropped; \(Self.number(summary.wall.seconds)) s, "
                + "\(Self.number(summary.tasksPerSecond)) tasks/s"
        }
    }

    static func label(_ task: ScanTask) -> String {
        if task.kind == ExecScanner.kind, let request = try? ExecRequest(scanBytes: task.input) {
            return "\(request.sequence) (\(request.commandLine))"
        }
        return task.sector.map(String.init) ?? task.id.description
    }

    /// ``human(_:)`` and a newline, as bytes (``appendHumanLine(_:to:)``).
    static func humanLine(_ result: FinalResult) -> [UInt8] {
        var line: [UInt8] = []
        Self.appendHumanLine(result, to: &line)
        return line
    }

    static func human(_ result: FinalResult) -> String {
        let label = Self.label(result.task)
        let attempts = result.attempts > 1 ? " (attempt \(result.attempts))" : ""
        switch result.status {
        case .completed:
            return "Completed: \(label) by \(result.system)\(attempts)"
        case .failed:
            return
                "Failed: \(label) after \(result.attempts) attempt\(result.attempts == 1 ? "" : "s"), last on \(result.system): \(result.error ?? "")"
        case .cancelled:
            return "Cancelled: \(label)"
        }
    }

    /// A non-command result's `--json` object (``appendJSONLine(_:to:)``, without its newline).
    static func json(_ result: FinalResult) -> String {
        var line: [UInt8] = []
        Self.appendJSONLine(result, to: &line)
        return String(decoding: line.dropLast(), as: UTF8.self)
    }

    /// A JSON string literal.
    package static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += "\\u" + String(scalar.value, radix: 16).leftPadded(to: 4)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    static func number(_ value: Double) -> String {
        guard value.isFinite else { return "0" }
        let rounded = (value * 1000).rounded() / 1000
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }
}
