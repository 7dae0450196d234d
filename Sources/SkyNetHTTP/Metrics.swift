import Foundation
import Prometheus
public import SkyNet
import Synchronization

/// `/metrics`: the broker's status as Prometheus metrics, through swift-prometheus. Counters follow
/// the broker's totals (each scrape adds what changed since the last), gauges are set; a label set
/// is fixed per name (swift-prometheus refuses a name with two label sets), and no metric is
/// labelled by task or job id.
public final class MetricsExporter: Sendable {
    private struct State {
        /// Each counter and the total it was brought to.
        var counters: [String: (Counter, Double)] = [:]
        /// Each gauge, with its name and labels (to drop a lost worker's, to zero an empty kind's).
        var gauges: [String: (gauge: Gauge, name: String, labels: [String: String])] = [:]
    }

    private let registry = PrometheusCollectorRegistry()
    private let state = Mutex(State())

    public init() {}

    /// The metrics of `status` in Prometheus's text format (version 0.0.4).
    public func render(_ status: BrokerStatus?) -> String {
        self.state.withLock { state in
            if let status { self.update(&state, status) }
            self.process(&state)
        }
        var text = self.registry.emitToString()
        if let status { text += Self.histograms(status) }
        return text
    }

    /// The histograms, written here in the text format: the broker keeps them as bucket counts on its
    /// reactor thread (a few increments per task), and swift-prometheus's `Histogram` takes one
    /// observation at a time, behind a lock, which would put every task's figures through this thread.
    static func histograms(_ status: BrokerStatus) -> String {
        let kinds = status.kinds.sorted { $0.key < $1.key }
        var text = ""
        text += Self.histogram(
            "skynet_task_queue_wait_seconds",
            "Time from queued to sent to a worker, by kind (whole milliseconds).",
            kinds.map { ([("kind", $0.key)], $0.value.queueWait) }
        )
        text += Self.histogram(
            "skynet_task_run_seconds",
            "Scan time of each attempt's result, as its worker measured it, by kind (cancelled ones left out).",
            kinds.map { ([("kind", $0.key)], $0.value.runTime) }
        )
        if let commits = status.journalCommit {
            text += Self.histogram(
                "skynet_journal_commit_seconds",
                "Time of each group commit of the journal (write and fdatasync).",
                [([], commits)]
            )
        }
        return text
    }

    /// One histogram family: `_bucket` (cumulative, `le`), `_sum` and `_count` per label set.
    static func histogram(_ name: String, _ help: String, _ series: [([(String, String)], LatencyHistogram)]) -> String
    {
        guard !series.isEmpty else { return "" }
        var lines = ["# HELP \(name) \(help)", "# TYPE \(name) histogram"]
        for (labels, histogram) in series {
            let base = labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }
            let plain = base.isEmpty ? "" : "{\(base.joined(separator: ","))}"
            for (index, total) in histogram.cumulative.enumerated() {
                let bound = index < LatencyHistogram.bounds.count ? "\(LatencyHistogram.bounds[index])" : "+Inf"
                lines.append("\(name)_bucket{\((base + ["le=\"\(bound)\""]).joined(separator: ","))} \(total)")
            }
            lines.append("\(name)_sum\(plain) \(histogram.sumSeconds)")
            lines.append("\(name)_count\(plain) \(histogram.count)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A label value as the text format writes it: backslash, double quote and newline escaped.
    static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    /// A whole metric name (its unit already in it) and its help.
    private static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    private func key(_ name: String, _ labels: [(String, String)]) -> String {
        name + labels.map { "|\($0.0)=\($0.1)" }.joined()
    }

    /// Brings a counter to `total` (the broker's running count).
    private func count(
        _ state: inout State,
        _ name: String,
        _ help: String,
        _ labels: [(String, String)] = [],
        total: Double
    ) {
        let key = self.key(name, labels)
        let (counter, last) =
            state.counters[key]
            ?? (self.registry.makeCounter(descriptor: Self.descriptor(name, help), labels: labels), 0)
        if total > last { counter.increment(by: total - last) }
        state.counters[key] = (counter, max(total, last))
    }

    private func count(
        _ state: inout State,
        _ name: String,
        _ help: String,
        _ labels: [(String, String)] = [],
        total: Int
    ) {
        self.count(&state, name, help, labels, total: Double(total))
    }

    private func gauge(
        _ state: inout State,
        _ name: String,
        _ help: String,
        _ labels: [(String, String)] = [],
        _ value: Double
    ) {
        let key = self.key(name, labels)
        let gauge =
            state.gauges[key]?.gauge
            ?? self.registry.makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
        state.gauges[key] = (gauge, name, Dictionary(labels, uniquingKeysWith: { _, last in last }))
        gauge.set(value)
    }

    private func update(_ state: inout State, _ status: BrokerStatus) {
        // Workers come and go: their per-worker gauges go with them.
        let present = Set(status.workers.map(\.name))
        for (key, entry) in state.gauges {
            guard let worker = entry.labels["worker"], !present.contains(worker) else { continue }
            self.registry.unregisterGauge(entry.gauge)
            state.gauges[key] = nil
        }
        for worker in status.workers {
            let labels = [("worker", worker.name)]
            self.gauge(&state, "skynet_worker_slots", "Slots of a worker's ScanSystem.", labels, Double(worker.slots))
            self.gauge(
                &state,
                "skynet_worker_slots_busy",
                "A worker's slots with a task leased.",
                labels,
                Double(min(worker.leased, worker.slots))
            )
            self.gauge(
                &state,
                "skynet_worker_tasks_lent",
                "Tasks lent to a worker beyond its slots, because its tasks are short (they wait there for a slot).",
                labels,
                Double(worker.lent ?? 0)
            )
            self.gauge(
                &state,
                "skynet_worker_draining",
                "1 while a worker drains (takes no new tasks).",
                labels,
                worker.draining ? 1 : 0
            )
            if let heard = worker.lastHeardMilliseconds {
                self.gauge(
                    &state,
                    "skynet_worker_last_heard_seconds",
                    "Seconds since the broker last heard from a worker.",
                    labels,
                    Double(heard) / 1000
                )
            }
            // What each worker says of itself with its heartbeats: one scrape sees the whole pool.
            // Gauges, not counters: a worker's totals start again when it restarts under its name.
            if let figures = worker.figures {
                self.gauge(
                    &state,
                    "skynet_worker_info",
                    "1 for each worker, with the host it runs on.",
                    [("worker", worker.name), ("host", figures.host)],
                    1
                )
                self.gauge(
                    &state,
                    "skynet_worker_tasks_running",
                    "Scans a worker runs now (its own count).",
                    labels,
                    Double(figures.running)
                )
                self.gauge(
                    &state,
                    "skynet_worker_tasks_done",
                    "Attempts a worker completed since it started.",
                    labels,
                    Double(figures.done)
                )
                self.gauge(
                    &state,
                    "skynet_worker_tasks_failed",
                    "Attempts that failed on a worker since it started.",
                    labels,
                    Double(figures.failed)
                )
                self.gauge(
                    &state,
                    "skynet_worker_resident_memory_bytes",
                    "Resident memory of a worker process.",
                    labels,
                    Double(figures.residentBytes)
                )
                self.gauge(
                    &state,
                    "skynet_worker_cpu_seconds",
                    "CPU time of a worker process since it started.",
                    labels,
                    figures.cpuSeconds
                )
            }
        }
        let draining = status.workers.filter(\.draining).count
        for (state_, count) in [("ready", status.workers.count - draining), ("draining", draining)] {
            self.gauge(&state, "skynet_workers", "Workers registered, by state.", [("state", state_)], Double(count))
        }
        let slots = status.workers.reduce(0) { $0 + $1.slots }
        self.gauge(
            &state,
            "skynet_slots",
            "Slots of all workers, by state.",
            [("state", "busy")],
            Double(status.leased)
        )
        self.gauge(
            &state,
            "skynet_slots",
            "Slots of all workers, by state.",
            [("state", "free")],
            Double(max(0, slots - status.leased))
        )
        self.gauge(&state, "skynet_coordinators", "Coordinators connected.", [], Double(status.coordinators))
        // Every kind the broker has seen stays in `kinds` (0 when none are queued).
        for (kind, figures) in status.kinds {
            self.gauge(&state, "skynet_queue_depth", "Tasks queued, by kind.", [("kind", kind)], Double(figures.queued))
            self.gauge(
                &state,
                "skynet_queue_oldest_age_seconds",
                "How long the oldest queued task of a kind has waited (0 with none queued).",
                [("kind", kind)],
                figures.oldestQueuedSeconds
            )
        }
        self.gauge(&state, "skynet_tasks_leased", "Tasks leased to workers now.", [], Double(status.leased))
        self.gauge(
            &state,
            "skynet_tasks_inflight",
            "Tasks at the broker now, queued or leased.",
            [],
            Double(status.queued + status.leased)
        )
        // 0 on an HA standby: a query over several brokers (KEDA's) counts only the one that leads.
        self.gauge(
            &state,
            "skynet_broker_leading",
            "1 when this broker serves (alone, or leading its HA group), 0 on a standby.",
            [],
            status.role == "standby" ? 0 : 1
        )
        self.gauge(
            &state,
            "skynet_messages_parked",
            "Messages waiting for a peer's pipe to have room.",
            [],
            Double(status.parkedMessages)
        )
        self.count(&state, "skynet_tasks_submitted_total", "Tasks accepted.", total: status.submitted)
        self.count(
            &state,
            "skynet_tasks_recovered_total",
            "Tasks queued again from the journal at start.",
            total: status.recovered
        )
        self.count(&state, "skynet_tasks_dispatched_total", "TASKs sent to workers.", total: status.dispatched)
        for (label, total) in [
            ("completed", status.resultsCompleted), ("failed", status.resultsFailed),
            ("cancelled", status.resultsCancelled),
        ] {
            self.count(
                &state,
                "skynet_task_results_total",
                "How tasks ended at the broker, by status (a worker's result, or cancelled or failed there).",
                [("status", label)],
                total: total
            )
        }
        self.count(
            &state,
            "skynet_stale_results_total",
            "Results of attempts no longer waited for.",
            total: status.staleResults
        )
        self.count(
            &state,
            "skynet_tasks_requeued_total",
            "Tasks queued again after their worker was lost.",
            total: status.requeued
        )
        self.count(&state, "skynet_tasks_rejected_total", "SUBMITs refused.", total: status.rejected)
        self.count(&state, "skynet_workers_registered_total", "Workers registered.", total: status.workersRegistered)
        self.count(&state, "skynet_workers_lost_total", "Workers declared lost.", total: status.workersLost)
        self.count(
            &state,
            "skynet_refused_handshakes_total",
            "Handshakes and messages refused by CURVE.",
            total: status.refusedHandshakes
        )
        for (reason, total) in status.badInput {
            self.count(
                &state,
                "skynet_bad_input_total",
                "Malformed input dropped, by reason.",
                [("reason", reason)],
                total: total
            )
        }
    }

    /// The process's resident memory and CPU time, from /proc.
    private func process(_ state: inout State) {
        let (rss, seconds) = WorkerFigures.process()
        self.gauge(
            &state,
            "skynet_process_resident_memory_bytes",
            "Resident memory of the broker process.",
            [],
            Double(rss)
        )
        self.count(&state, "skynet_process_cpu_seconds_total", "CPU time of the broker process.", total: seconds)
    }
}
