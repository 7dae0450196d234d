// What ``BrokerState`` keeps and says: its entries for workers, tasks and coordinators, the actions
// it returns, and its figures.
extension BrokerState {
    /// A class: the hot path reads and updates a worker's fields in place (a struct in a dictionary
    /// was copied, sets and strings and all, on every read through the dictionary's getter).
    package final class WorkerEntry {
        /// What a dispatch and a RESULT read and change, in one stored value: every use of a class's
        /// stored property is a dynamic exclusivity check (~50 instructions), so the hot path reads
        /// and updates these through one access each (``Load``'s methods), not one per field.
        package struct Load {
            package var capacity: Int
            package var leases = LeaseSet()
            /// Expired leases (task → attempt) whose scans still hold a slot until their RESULT comes.
            package var stuck: [TaskID: UInt32] = [:]
            package var draining = false
            package var lastUsed: UInt64 = 0
            /// Its place in ``BrokerState/withCredit`` (-1: not there).
            var creditIndex = -1
            /// Tasks lent beyond ``capacity`` while this worker's tasks are short.
            package var prefetch = ShortTaskPrefetch()

            /// Its capacity and what is lent beyond it (``ShortTaskPrefetch``).
            package var limit: Int { self.capacity + self.prefetch.extra(capacity: self.capacity) }

            package var credit: Int { self.draining ? 0 : max(0, self.limit - self.leases.count - self.stuck.count) }

            /// How it ranks for a dispatch: fewest leases first, then least recently used; nil without
            /// credit.
            var rank: (leases: Int, lastUsed: UInt64)? {
                self.credit > 0 ? (self.leases.count, self.lastUsed) : nil
            }

            /// After its credit may have changed: whether it has credit, and its place in
            /// ``BrokerState/withCredit`` (-1: not there). A worker left with no task (a result,
            /// a cancel, a lost coordinator, however its last lease ended) starts its lending over
            /// (``ShortTaskPrefetch/idle()``).
            mutating func settle() -> (hasCredit: Bool, index: Int) {
                if self.leases.isEmpty && self.stuck.isEmpty { self.prefetch.idle() }
                return (self.credit > 0, self.creditIndex)
            }

            /// Room in ``leases`` for four times the capacity: a worker of short tasks holds half as
            /// many again. (When `Set<TaskID>` held them, its own sizing left it at its most crowded
            /// there, and a removal rehashed the entries after it: ~550 instructions per task with 64
            /// slots.) A worker of tiny tasks is lent more (``ShortTaskPrefetch``, up to 32 per slot);
            /// its set grows then, doubling, once per size.
            mutating func reserve() {
                self.leases.reserveCapacity(4 * max(1, self.capacity))
            }

            /// A task is leased to it, as use number `use`.
            mutating func lease(_ id: TaskID, use: UInt64) {
                self.leases.insert(id)
                self.lastUsed = use
            }
        }

        package let id: PeerID
        package var name: String
        #if DEBUG
        package var load: Load
        #else
        // Release builds skip the dynamic exclusivity check of the properties marked so here; debug
        // builds (every test, the fuzzer) keep it. Why each is safe: docs/DESIGN.md §3, "Unchecked
        // exclusivity", and the line below.
        // Unchecked: `Load`'s methods touch only its own fields and call nothing.
        @exclusivity(unchecked) package var load: Load
        #endif
        package var capacity: Int {
            get { self.load.capacity }
            set { self.load.capacity = newValue }
        }
        package var kinds: Set<String> {
            didSet { self.lastKind = nil }
        }
        package var leases: LeaseSet {
            get { self.load.leases }
            _modify { yield &self.load.leases }
        }
        /// The kind asked of ``scans(_:)`` last, and the answer: every dispatch asks, almost always
        /// of the same kind, and a hash of the kind per task cost more than the comparison.
        #if DEBUG
        private var lastKind: (kind: String, scans: Bool)?
        #else
        // Unchecked: a plain value, read or replaced whole.
        @exclusivity(unchecked) private var lastKind: (kind: String, scans: Bool)?
        #endif
        /// Expired leases (task → attempt) whose scans still hold a slot until their RESULT comes.
        package var stuck: [TaskID: UInt32] {
            get { self.load.stuck }
            _modify { yield &self.load.stuck }
        }
        #if DEBUG
        package var lastSeen: ContinuousClock.Instant
        #else
        // Unchecked: a plain value, read or replaced whole.
        @exclusivity(unchecked) package var lastSeen: ContinuousClock.Instant
        #endif
        package var heartbeat: Heartbeat
        package var lastUsed: UInt64 { self.load.lastUsed }
        package var draining: Bool {
            get { self.load.draining }
            set { self.load.draining = newValue }
        }
        /// What the worker last said of itself (FIGURES), if it did.
        package var figures: WorkerFigures?

        package var credit: Int { self.load.credit }

        /// Whether it scans `kind`.
        func scans(_ kind: String) -> Bool {
            if let last = self.lastKind, last.kind == kind { return last.scans }
            let scans = self.kinds.contains(kind)
            self.lastKind = (kind, scans)
            return scans
        }

        package init(
            id: PeerID,
            name: String,
            capacity: Int,
            kinds: Set<String>,
            lastSeen: ContinuousClock.Instant,
            heartbeat: Heartbeat
        ) {
            self.id = id
            self.name = name
            self.load = Load(capacity: capacity)
            self.load.reserve()
            self.kinds = kinds
            self.lastSeen = lastSeen
            self.heartbeat = heartbeat
        }
    }

    /// A live task. Its coordinator's and worker's ids are kept as their parts (``PeerID/Parts``),
    /// with the two form bytes in the envelope's tail padding: as `PeerID` and `PeerID?` fields
    /// (17 and 18 bytes, each aligned to 8) the entry took 136 bytes; this way 120.
    package struct TaskEntry {
        package let id: TaskID
        private let coordinatorWords: (UInt64, UInt64)
        package let envelope: TaskEnvelope
        private let coordinatorForm: UInt8
        /// ``PeerID/Parts/noForm`` while queued.
        private var workerForm: UInt8
        /// Held in place when small (``TaskBytes``): no allocation per task.
        package let input: TaskBytes
        package var attempt: UInt32
        /// When it was queued (submitted, or queued again), on ``BrokerState/clock``: it fills the
        /// padding after `attempt`, so it costs no memory.
        package var queuedAt: UInt32
        private var workerWords: (UInt64, UInt64)
        package var ticket: UInt64

        package init(
            id: TaskID,
            coordinator: PeerID,
            envelope: TaskEnvelope,
            input: TaskBytes,
            attempt: UInt32,
            queuedAt: UInt32,
            worker: PeerID?,
            ticket: UInt64
        ) {
            let owner = coordinator.parts
            let leased = worker?.parts ?? .none
            self.id = id
            self.coordinatorWords = (owner.a, owner.b)
            self.envelope = envelope
            self.coordinatorForm = owner.form
            self.workerForm = leased.form
            self.input = input
            self.attempt = attempt
            self.queuedAt = queuedAt
            self.workerWords = (leased.a, leased.b)
            self.ticket = ticket
        }

        /// What a vacant slot of the ``TaskTable`` holds: id zero and ticket 0 (no live task has
        /// either), nothing to release. Built field by field: through the memberwise initializer, an
        /// empty coordinator id was classified and an empty input made from an array literal (~120
        /// instructions per task ended).
        package static var vacant: TaskEntry { TaskEntry() }

        private init() {
            self.id = TaskID(high: 0, low: 0)
            self.coordinatorWords = (0, 0)
            self.envelope = TaskEnvelope(kind: "")
            self.coordinatorForm = 0  // an empty id's form (raw bytes, none of them)
            self.workerForm = PeerID.Parts.noForm
            self.input = .inline(TaskBytes.Inline())
            self.attempt = 0
            self.queuedAt = 0
            self.workerWords = (0, 0)
            self.ticket = 0
        }

        /// Its coordinator's id.
        package var coordinator: PeerID {
            PeerID(PeerID.Parts(a: self.coordinatorWords.0, b: self.coordinatorWords.1, form: self.coordinatorForm))!
        }

        /// Whether it is queued (leased to no worker), read without making the worker's id.
        package var isQueued: Bool { self.workerForm == PeerID.Parts.noForm }

        /// Whether it is leased to `worker`, compared part by part.
        package func isLeased(to worker: PeerID) -> Bool {
            let parts = worker.parts
            return self.workerForm == parts.form && self.workerWords.0 == parts.a && self.workerWords.1 == parts.b
        }

        /// The worker it is leased to, or nil while it is queued.
        package var worker: PeerID? {
            get { PeerID(PeerID.Parts(a: self.workerWords.0, b: self.workerWords.1, form: self.workerForm)) }
            set {
                let parts = newValue?.parts ?? .none
                self.workerWords = (parts.a, parts.b)
                self.workerForm = parts.form
            }
        }
    }

    /// A class for the same reason as ``WorkerEntry``: every message from a coordinator updates it.
    package final class CoordinatorEntry {
        /// Its id (its tasks keep a copy, a plain value).
        package let id: PeerID
        #if DEBUG
        package var lastSeen: ContinuousClock.Instant
        #else
        // Unchecked: a plain value, read or replaced whole (as the next two).
        @exclusivity(unchecked) package var lastSeen: ContinuousClock.Instant
        #endif
        /// How many live tasks it has (``BrokerState/tasks(of:)`` finds them).
        #if DEBUG
        package var taskCount = 0
        #else
        // Unchecked: a plain value.
        @exclusivity(unchecked) package var taskCount = 0
        #endif
        /// Known only from a recovered journal: it has until then to reconnect (and is not declared
        /// lost when a send to it fails meanwhile).
        package var awaitingReconnect: ContinuousClock.Instant? {
            get { self.isAwaitingReconnect ? self.reconnectBy : nil }
            set {
                if let newValue { self.reconnectBy = newValue }
                self.isAwaitingReconnect = newValue != nil
            }
        }
        /// Whether ``awaitingReconnect`` is set, asked on every SUBMIT. Stored apart from the instant:
        /// `Instant` is not frozen, so an optional one was tested, copied and destroyed through the
        /// runtime's value witnesses (~200 instructions a SUBMIT).
        #if DEBUG
        package private(set) var isAwaitingReconnect: Bool
        #else
        // Unchecked: a plain value.
        @exclusivity(unchecked) package private(set) var isAwaitingReconnect: Bool
        #endif
        private var reconnectBy: ContinuousClock.Instant
        /// Its SUBMITs say it reads ACCEPTED lists (``Header/readsAcceptedListsFlag``): its held first
        /// ACCEPTEDs go as lists.
        #if DEBUG
        package var readsAcceptedLists = false
        #else
        // Unchecked: a plain value.
        @exclusivity(unchecked) package var readsAcceptedLists = false
        #endif
        /// A detached job (its id is ``PeerID/job(_:)``'s), not a connected peer: it never expires and
        /// is never sent to.
        package var detached: Bool { self.id.job != nil }
        /// What it last said of its running job (FIGURES), if it did.
        package var job: JobFigures?

        package init(id: PeerID, lastSeen: ContinuousClock.Instant, awaitingReconnect: ContinuousClock.Instant? = nil) {
            self.id = id
            self.lastSeen = lastSeen
            self.isAwaitingReconnect = awaitingReconnect != nil
            self.reconnectBy = awaitingReconnect ?? lastSeen
        }
    }

    package enum Action: Equatable {
        /// Send TASK for this task (as now recorded) to the worker.
        case dispatch(worker: PeerID, TaskID, hint: SlotHint = .none)
        /// Send ACCEPTED to the coordinator (`requeued` after a lost worker).
        case accepted(coordinator: PeerID, TaskID, attempt: UInt32, requeued: Bool, hint: SlotHint = .none)
        case rejected(coordinator: PeerID, TaskID, RejectReason, String)
        /// Send the coordinator a RESULT the broker made up (failed after its worker was lost, or cancelled).
        case resultForCoordinator(coordinator: PeerID, TaskID, attempt: UInt32, ResultStatus, reason: String)
        /// Send CANCEL to the worker running the task.
        case cancelOnWorker(worker: PeerID, TaskID)
        /// Send DISCONNECT to a peer.
        case disconnect(PeerID, DisconnectReason, String)
        /// A coordinator went silent past ``BrokerState/coordinatorExpiry`` and was dropped with
        /// `tasks` (a durable broker's journal forgets them). If it comes back it is told to send its
        /// unfinished tasks again.
        case coordinatorExpired(PeerID, tasks: [TaskID])
    }

    /// What to do with a RESULT from a worker.
    package enum ResultDisposition: Equatable {
        /// Forward it to this coordinator: it is the live attempt.
        case forward(coordinator: PeerID)
        /// Drop it: another attempt, another worker, or a task no longer here.
        case stale
        /// The sender is not a registered worker: tell it to register again.
        case unknownWorker
    }

    /// A coordinator's job that the broker no longer sees: it finished, or its coordinator left.
    package struct EndedJob {
        package let coordinator: PeerID
        package let figures: JobFigures
        package let ended: ContinuousClock.Instant
        /// Its coordinator left (or went silent) rather than starting another job.
        package let left: Bool
    }

    /// What the broker counted since it started. The task figures reconcile at every step (the
    /// fuzzer checks it): `submitted + recovered == resultsCompleted + resultsFailed +
    /// resultsCancelled + tasks in flight (queued or leased)`.
    package struct Figures: Equatable {
        /// Workers registered (a READY from a worker the broker did not know).
        package var registrations = 0
        /// Tasks accepted (each SUBMIT of a new task or a new attempt).
        package var submitted = 0
        /// Tasks queued again from the journal at start.
        package var recovered = 0
        package var dispatched = 0
        /// Worker RESULTs that went to their coordinators.
        package var resultsForwarded = 0
        /// How each task (attempt) ended at the broker: a worker's RESULT, or the broker's own word
        /// (cancelled while queued, dropped with its lost coordinator, failed with no attempt left).
        /// Failed includes timed out.
        package var resultsCompleted = 0
        package var resultsFailed = 0
        package var resultsCancelled = 0
        package var staleResults = 0
        package var requeued = 0
        package var workersLost = 0
        package var coordinatorsLost = 0
        package var rejected = 0
        package var leasesExpired = 0

        /// A worker's RESULT went to its coordinator.
        package mutating func forwarded(_ status: ResultStatus) {
            self.resultsForwarded += 1
            self.ended(status)
        }

        /// A task ended at the broker with `status`.
        package mutating func ended(_ status: ResultStatus) {
            switch status {
            case .completed: self.resultsCompleted += 1
            case .failed, .timedOut: self.resultsFailed += 1
            case .cancelled: self.resultsCancelled += 1
            }
        }
    }
}
