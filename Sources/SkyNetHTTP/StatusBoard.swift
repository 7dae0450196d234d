public import SkyNet
import Foundation
import Synchronization

/// The broker's latest status, kept for the HTTP endpoint: the broker's reactor publishes a
/// snapshot at most every 250 ms (``Broker/observe(every:_:)``), and HTTP handlers on their own
/// threads read it. It also keeps what a single snapshot cannot show: rates, a few minutes of
/// history for the chart, and the workers that were lost (they vanish from the broker's list).
public final class StatusBoard: Sendable {
    struct Sample: Codable, Sendable {
        /// Seconds since 1970.
        var time: Double
        var completed: Int
        var failed: Int
        var queued: Int
        var leased: Int
    }

    struct Lost: Codable, Sendable {
        var name: String
        var host: String?
        var time: Double
    }

    struct State {
        var status: BrokerStatus?
        var time: Double = 0
        var history: [Sample] = []
        var lost: [Lost] = []
    }

    private let state = Mutex(State())
    /// How much history the chart keeps (one sample a second).
    static let historySeconds = 300

    public init() {}

    /// Takes a new snapshot (the broker's reactor calls this; it only stores).
    public func publish(_ status: BrokerStatus, now: Double? = nil) {
        let now = now ?? Date().timeIntervalSince1970
        self.state.withLock { state in
            if let previous = state.status {
                // A worker gone without draining was lost; a draining one left.
                let current = Set(status.workers.map(\.id))
                for worker in previous.workers where !current.contains(worker.id) && !worker.draining {
                    state.lost.append(Lost(name: worker.name, host: worker.figures?.host, time: now))
                }
                state.lost.removeAll { lost in status.workers.contains { $0.name == lost.name } }
                if state.lost.count > 100 { state.lost.removeFirst(state.lost.count - 100) }
            }
            state.status = status
            state.time = now
            if state.history.last.map({ now - $0.time >= 1 }) ?? true {
                state.history.append(
                    Sample(
                        time: now,
                        completed: status.resultsCompleted,
                        failed: status.resultsFailed,
                        queued: status.queued,
                        leased: status.leased
                    )
                )
                if state.history.count > Self.historySeconds { state.history.removeFirst() }
            }
        }
    }

    /// The latest status, if one was published.
    public var status: BrokerStatus? { self.state.withLock { $0.status } }

    /// What `/api/status` serves: the broker's status (as `skynet status --json` prints it), the
    /// book's three indicators (scheduled, per second, completed) with failed and cancelled, the
    /// history and the lost workers. The indicators are tasks as their jobs count them
    /// (``BrokerStatus/taskTotals``: local retries included, the same figures as the job rows); the
    /// rate and the history are the broker's attempts (``BrokerStatus/resultsCompleted``).
    public struct View: Codable, Sendable {
        var time: Double
        var scheduled: Int
        var perSecond: Double
        var completed: Int
        var failed: Int
        var cancelled: Int
        var status: BrokerStatus
        var history: [Sample]
        var lostWorkers: [Lost]

        enum CodingKeys: String, CodingKey {
            case time, scheduled, completed, failed, cancelled, status, history
            case perSecond
            case lostWorkers
        }
    }

    public func view() -> View? {
        self.state.withLock { state in
            guard let status = state.status else { return nil }
            var rate = 0.0
            if let last = state.history.last,
                let first = state.history.last(where: { last.time - $0.time >= 5 }) ?? state.history.first,
                last.time > first.time
            {
                rate = Double(last.completed + last.failed - first.completed - first.failed) / (last.time - first.time)
            }
            return View(
                time: state.time,
                scheduled: status.taskTotals.tasks,
                perSecond: rate,
                completed: status.taskTotals.completed,
                failed: status.taskTotals.failed,
                cancelled: status.taskTotals.cancelled,
                status: status,
                history: state.history,
                lostWorkers: state.lost
            )
        }
    }

    /// ``view()`` as one line of JSON (keys sorted).
    public func json() -> String {
        guard let view = self.view() else { return "{}" }
        return (try? JSONStyle.encoder.encode(view)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}
