package import Foundation

/// A snapshot of a broker: its workers, queue depth and figures (STATUS, `skynet status`). The
/// figures count since the broker process started.
public struct BrokerStatus: Sendable, Codable, Equatable {
    /// One registered worker.
    public struct Worker: Sendable, Codable, Equatable {
        /// Its routing id (`w-…`).
        public var id: String
        /// The name it registered with (`--name`).
        public var name: String
        /// Its ScanSystem's slots.
        public var slots: Int
        /// Tasks leased to it now (running, or waiting there for a slot).
        public var leased: Int
        /// Tasks lent beyond its slots now, because its tasks are short (nil or 0: none;
        /// ``BrokerConfiguration/prefetchShortTasks``): `leased` may exceed `slots` by that many.
        public var lent: Int?
        /// The task kinds it scans.
        public var kinds: [String]
        /// It is draining: it takes no new tasks.
        public var draining: Bool
        /// What it last said of itself with its heartbeat (nil before its first).
        public var figures: WorkerFigures?
        /// Milliseconds since the broker last heard from it.
        public var lastHeardMilliseconds: Int?
        /// The first characters of its CURVE key (nil without CURVE).
        public var key: String?
        /// Another live worker holds the same key: a copied secret, or one host started twice.
        public var sharedKey: Bool = false
    }

    /// A job: a connected coordinator's (as it reports it with its heartbeats), one that ended lately,
    /// or a detached job the broker holds.
    public struct Job: Sendable, Codable, Equatable {
        /// A detached job's id; a coordinator's routing id and the job's serial.
        public var id: String
        public var name: String
        public var detached: Bool
        /// `running`, `cancelling`, `finished`, or `left` (its coordinator went before the end).
        public var state: String
        /// Tasks in the job, and those with their final result by status.
        public var tasks: Int
        public var completed: Int
        public var failed: Int
        public var cancelled: Int
        /// Answered from a result cache.
        public var fromCache: Int
        /// Its tasks at the broker now (queued or leased); for a detached job, those without a
        /// result on disk.
        public var atBroker: Int
        /// Seconds since it was submitted (a coordinator's job, as it said last).
        public var elapsedSeconds: Double?
        /// Seconds since it ended (nil while it runs).
        public var endedSecondsAgo: Double?
        /// The last few tasks that failed every attempt, with their last error.
        public var deadLetters: [JobFigures.DeadLetter]

        public init(
            id: String,
            name: String,
            detached: Bool,
            state: String,
            tasks: Int,
            completed: Int,
            failed: Int,
            cancelled: Int,
            fromCache: Int = 0,
            atBroker: Int = 0,
            elapsedSeconds: Double? = nil,
            endedSecondsAgo: Double? = nil,
            deadLetters: [JobFigures.DeadLetter] = []
        ) {
            self.id = id
            self.name = name
            self.detached = detached
            self.state = state
            self.tasks = tasks
            self.completed = completed
            self.failed = failed
            self.cancelled = cancelled
            self.fromCache = fromCache
            self.atBroker = atBroker
            self.elapsedSeconds = elapsedSeconds
            self.endedSecondsAgo = endedSecondsAgo
            self.deadLetters = deadLetters
        }

        /// A coordinator's job from what it reported.
        package init(coordinator: PeerID, _ figures: JobFigures, state: String, atBroker: Int, endedSecondsAgo: Double?)
        {
            self.init(
                id: "\(coordinator)/\(figures.serial)",
                name: figures.name,
                detached: false,
                state: state,
                tasks: figures.tasks,
                completed: figures.completed,
                failed: figures.failed,
                cancelled: figures.cancelled,
                fromCache: figures.fromCache,
                atBroker: atBroker,
                elapsedSeconds: figures.elapsedSeconds,
                endedSecondsAgo: endedSecondsAgo,
                deadLetters: figures.deadLetters
            )
        }

        package enum CodingKeys: String, CodingKey {
            case id, name, detached, state, tasks, completed, failed, cancelled
            case fromCache
            case atBroker
            case elapsedSeconds
            case endedSecondsAgo
            case deadLetters
        }
    }

    /// Changes on every broker start.
    public var epoch: UInt32
    /// In an HA group: "leader" or "standby" (nil for a broker on its own).
    public var role: String?
    /// In an HA group: the leader's frontend endpoint, as it advertises it, when known.
    public var leader: String?
    /// Tasks as their jobs count them (final outcomes, a coordinator's local retries included):
    /// connected coordinators' jobs as they last reported them (with each heartbeat), the jobs that
    /// ended since the broker started, and detached jobs. What the dashboard's headline shows, so
    /// that it and the job rows agree; `tasks == completed + failed + cancelled + unfinished`. A job
    /// that never reported (a one-task `run` shorter than a heartbeat) is not in it; the attempt
    /// figures below are.
    public struct TaskTotals: Sendable, Codable, Equatable {
        public var tasks = 0
        public var completed = 0
        public var failed = 0
        public var cancelled = 0
        /// Not finished yet.
        public var unfinished: Int { self.tasks - self.completed - self.failed - self.cancelled }

        public init() {}

        /// Adds a job's figures; with `ended`, its unfinished tasks count as cancelled (its
        /// coordinator left without them).
        package mutating func add(tasks: Int, completed: Int, failed: Int, cancelled: Int, ended: Bool = false) {
            self.tasks += tasks
            self.completed += completed
            self.failed += failed
            self.cancelled += ended ? max(cancelled, tasks - completed - failed) : cancelled
        }

        package mutating func add(_ other: TaskTotals) {
            self.add(tasks: other.tasks, completed: other.completed, failed: other.failed, cancelled: other.cancelled)
        }
    }

    /// Tasks by their jobs' account (see ``TaskTotals``).
    public var taskTotals = TaskTotals()

    /// Registered workers, by name.
    public var workers: [Worker]
    /// Connected coordinators.
    public var coordinators: Int
    /// Tasks queued (not leased).
    public var queued: Int
    /// Queued tasks by kind.
    public var queuedByKind: [String: Int]
    /// Every kind the broker has queued since it started: its queue, the oldest queued task's age,
    /// and its queue-wait and run-time histograms.
    public var kinds: [String: Kind]
    /// Jobs: connected coordinators' running jobs, the last ended ones, then detached jobs.
    public var jobs: [Job]
    /// A durable broker's group commits (write and `fdatasync`); nil without a journal.
    public var journalCommit: LatencyHistogram?
    /// Tasks leased to workers.
    public var leased: Int
    /// Workers registered since the broker started (a READY from a worker it did not know: a new
    /// one, or one that was declared lost and came back). A known worker's READY again on a new
    /// connection is not counted.
    public var workersRegistered: Int
    /// Tasks accepted.
    public var submitted: Int
    /// Tasks queued again from the journal when this broker started.
    public var recovered: Int = 0
    /// TASKs sent to workers.
    public var dispatched: Int
    /// Worker RESULTs forwarded to coordinators.
    public var resultsForwarded: Int
    /// How tasks (attempts) ended at this broker: completed, failed or timed out, cancelled. A
    /// worker's RESULT, or the broker's own word: cancelled while queued, dropped with a lost
    /// coordinator, failed with no attempt left. They reconcile: `submitted + recovered ==
    /// resultsCompleted + resultsFailed + resultsCancelled + queued + leased`. (A coordinator's
    /// local retries are its own; its job's figures in ``jobs`` count them.)
    public var resultsCompleted: Int
    public var resultsFailed: Int
    public var resultsCancelled: Int
    /// RESULTs of an attempt the broker no longer waited for, dropped.
    public var staleResults: Int
    /// Tasks queued again after their worker was lost.
    public var requeued: Int
    /// Workers declared lost (silent, unreachable, or gone).
    public var workersLost: Int
    /// SUBMITs refused (queue full, invalid).
    public var rejected: Int
    /// Messages waiting for a peer's pipe to have room.
    public var parkedMessages: Int
    /// Bad input dropped, by reason.
    public var badInput: [String: Int]
    /// Both ports use CURVE with allowlists.
    public var curve: Bool
    /// Keys in the workers' allowlist (0 without CURVE).
    public var allowedWorkers: Int
    /// Keys in the coordinators' allowlist (0 without CURVE).
    public var allowedCoordinators: Int
    /// Handshakes refused (a key not in the port's allowlist, not CURVE) and messages refused from a
    /// peer whose key was removed or whose routing id another key used.
    public var refusedHandshakes: Int

    package init(
        state: borrowing BrokerState,
        now: ContinuousClock.Instant = .now,
        epoch: UInt32,
        badInput: [String: Int],
        parked: Int,
        curve: Bool = false,
        allowed: (workers: Int, coordinators: Int) = (0, 0),
        refusedHandshakes: Int = 0,
        detachedJobs: [Job] = [],
        journalCommit: LatencyHistogram? = nil,
        keys: [PeerID: String] = [:],
        detachedTotals: TaskTotals = TaskTotals()
    ) {
        self.curve = curve
        self.allowedWorkers = allowed.workers
        self.allowedCoordinators = allowed.coordinators
        self.refusedHandshakes = refusedHandshakes
        self.epoch = epoch
        var holders: [String: Int] = [:]
        for worker in state.workers.keys { if let key = keys[worker] { holders[key, default: 0] += 1 } }
        self.workers = state.workers.values.map { entry in
            let key = keys[entry.id]
            return Worker(
                id: entry.id.description,
                name: entry.name,
                slots: entry.capacity,
                leased: entry.leases.count,
                lent: entry.load.limit - entry.capacity,
                kinds: entry.kinds.sorted(),
                draining: entry.draining,
                figures: entry.figures,
                lastHeardMilliseconds: Int((now - entry.lastSeen).milliseconds),
                key: key.map { String($0.prefix(8)) },
                sharedKey: key.map { holders[$0, default: 0] > 1 } ?? false
            )
        }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
        self.coordinators = state.coordinators.values.filter { !$0.detached }.count
        self.queued = state.queueDepth
        self.queuedByKind = state.depthByKind
        self.kinds = state.kindFigures(now: now)
        self.jobs = Self.jobs(of: state, now: now) + detachedJobs
        var totals = state.endedTotals
        for entry in state.coordinators.values where !entry.detached {
            guard let job = entry.job else { continue }
            totals.add(tasks: job.tasks, completed: job.completed, failed: job.failed, cancelled: job.cancelled)
        }
        totals.add(detachedTotals)
        self.taskTotals = totals
        self.journalCommit = journalCommit
        self.leased = state.workers.values.reduce(0) { $0 + $1.leases.count }
        self.workersRegistered = state.figures.registrations
        self.submitted = state.figures.submitted
        self.recovered = state.figures.recovered
        self.dispatched = state.figures.dispatched
        self.resultsForwarded = state.figures.resultsForwarded
        self.resultsCompleted = state.figures.resultsCompleted
        self.resultsFailed = state.figures.resultsFailed
        self.resultsCancelled = state.figures.resultsCancelled
        self.staleResults = state.figures.staleResults
        self.requeued = state.figures.requeued
        self.workersLost = state.figures.workersLost
        self.rejected = state.figures.rejected
        self.parkedMessages = parked
        self.badInput = badInput
    }

    /// The connected coordinators' jobs (running first), then the ended ones, most recent first.
    private static func jobs(of state: borrowing BrokerState, now: ContinuousClock.Instant) -> [Job] {
        let live = state.coordinators.values.compactMap { entry -> Job? in
            guard let figures = entry.job, !entry.detached else { return nil }
            return Job(
                coordinator: entry.id,
                figures,
                state: figures.finished ? "finished" : "running",
                atBroker: entry.taskCount,
                endedSecondsAgo: nil
            )
        }.sorted { ($0.state == "running" ? 0 : 1, $0.id) < ($1.state == "running" ? 0 : 1, $1.id) }
        let ended = state.endedJobs.reversed().map { ended in
            Job(
                coordinator: ended.coordinator,
                ended.figures,
                state: ended.figures.finished ? "finished" : "left",
                atBroker: 0,
                endedSecondsAgo: (now - ended.ended).seconds
            )
        }
        return live + ended
    }
}

extension BrokerStatus: JSONLine {}

/// A value sent and printed as one line of JSON (STATUS and JOB replies).
public protocol JSONLine: Codable {}

extension JSONLine {
    /// One line of JSON, keys sorted and in snake case (`last_heard_milliseconds`), as every JSON
    /// SkyNet prints.
    public func json() -> String {
        guard let data = try? JSONStyle.encoder.encode(self) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    /// Parses one line of JSON (keys in snake case).
    public static func parse(_ json: String) throws -> Self {
        try JSONStyle.decoder.decode(Self.self, from: Data(json.utf8))
    }
}

/// The one JSON style of everything SkyNet prints or serves (`status --json`, `results --json`,
/// `jobs --json`, `/api/status`): keys in snake case, sorted, slashes not escaped. Dictionary keys
/// (kind names, reasons) are data and stay as they are.
package enum JSONStyle {
    /// An encoder in this style.
    package static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return encoder
    }

    /// A decoder for it.
    package static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return decoder
    }
}
