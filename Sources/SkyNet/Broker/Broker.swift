import SkyNetCore
import DequeModule
public import Logging
public import ServiceLifecycle
public import ZeroMQ

/// The broker: a queue of ScanTasks between coordinators (frontend ROUTER) and workers (backend
/// ROUTER), with credit dispatch, leases and heartbeats (DESIGN.md §§2–6).
///
/// It runs on a ``Reactor``: that thread is the actor's executor, owns both sockets, and calls the
/// socket handlers, so no message ever waits for a Swift concurrency thread. Bad input is dropped,
/// counted by reason and logged at most a few times a second; it is never fatal.
///
/// The actor does I/O only: it reads frames, hands each message to ``BrokerMachine`` (every rule:
/// dispatch, credit, leases, expiry, holds, limits, the stop gate, detached jobs, what waits for the
/// journal) and carries out the effects it returns. Its code is split by concern:
/// `Broker+Lifecycle.swift` (start, run, stop), `Broker+Receiving.swift` (reading both ROUTERs),
/// `Broker+Sending.swift` (effects, outboxes, flushing), `Broker+Journal.swift` (the journal thread
/// and compaction) and `Broker+Security.swift` (CURVE, allowlists, the routing id's key).
public actor Broker: Service {
    /// The bound endpoints, with real ports when bound to `*`.
    public struct Endpoints: Sendable, Equatable {
        /// Where coordinators connect (the frontend ROUTER).
        public let frontend: String
        /// Where workers connect (the backend ROUTER).
        public let backend: String
    }

    /// What a durable broker found in its journal when it started.
    public struct Recovery: Sendable, Equatable {
        /// Accepted, unfinished tasks queued again.
        public let tasks: Int
        /// Final results kept for their coordinators (or detached jobs).
        public let results: Int
        /// Records read.
        public let records: Int
        /// Bytes of a torn tail (a crash mid-write) that were cut off.
        public let droppedBytes: Int
    }

    /// The reactor whose thread runs this actor and owns its sockets.
    public nonisolated let reactor: Reactor
    /// The reactor, as this actor's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    let configuration: BrokerConfiguration
    let logger: Logger
    /// Changes on every start, so peers can tell a restarted broker (sent in HEARTBEAT).
    public nonisolated let epoch: UInt32

    enum Lifecycle {
        case idle
        case running(frontend: Socket, backend: Socket, endpoints: Endpoints)
        case stopped
    }

    var lifecycle = Lifecycle.idle
    /// Every broker rule; this actor does its I/O (DESIGN.md §5).
    #if DEBUG
    var machine: BrokerMachine
    #else
    // Release builds skip the dynamic exclusivity check of the properties marked so here; debug
    // builds (every test, the fuzzer) keep it. Why each is safe: docs/DESIGN.md §3, "Unchecked
    // exclusivity", and the line below.
    // Unchecked: a pure value (`BrokerMachine` cannot reach this actor); a closure handed to one of
    // its methods (`visitEntry` in `sendTask`) must not touch `machine` (debug builds trap if it does).
    @exclusivity(unchecked) var machine: BrokerMachine
    #endif
    /// The effects being carried out (``performEffects()``), and whether that is under way.
    #if DEBUG
    var effectBuffer: [BrokerMachine.Effect] = []
    #else
    // Unchecked: filled and emptied by `performEffects()` alone, never while it is iterated.
    @exclusivity(unchecked) var effectBuffer: [BrokerMachine.Effect] = []
    #endif
    #if DEBUG
    var performingEffects = false
    #else
    // Unchecked: a plain value.
    @exclusivity(unchecked) var performingEffects = false
    #endif
    #if DEBUG
    var frontOutbox = Outbox()
    #else
    // Unchecked: the closures an outbox calls (`flushPending`'s hold test, `enqueue`'s writer)
    // touch neither outbox (debug builds trap if they do).
    @exclusivity(unchecked) var frontOutbox = Outbox()
    #endif
    #if DEBUG
    var backOutbox = Outbox()
    #else
    // Unchecked: as `frontOutbox`.
    @exclusivity(unchecked) var backOutbox = Outbox()
    #endif
    var flushTimer: TimerID?
    var heartbeatTimer: TimerID?
    var flushHook: TimerID?
    /// Raised by the outboxes when they gather: the flush hook runs only then (``PollRequest``).
    let flushRequest = PollRequest()
    /// The ACCEPTED hold's timer (``Reactor/makeTimer(_:)``), made at the first hold; armed anew at
    /// the start of each hold, left armed when a hold ends first (``syncAcceptedHold()``).
    var acceptedTimer: TimerID?
    /// Whether the machine held ACCEPTEDs when last asked (``syncAcceptedHold()``): a hold starts
    /// when this turns true.
    var acceptedHoldArmed = false
    /// Made once: a closure made for every held ACCEPTED would be an allocation per task.
    lazy var acceptedTimerFired: () -> Void = { [weak self] in
        self?.assumeIsolated { broker in
            broker.acceptedHoldArmed = false  // fired: a hold from now on arms it again
            broker.machine.acceptedHoldExpired()
            broker.performEffects()
        }
    }
    var bulkTimer: TimerID?
    /// Senders seen last (see ``routedPeer(_:front:)``), read for every message received.
    #if DEBUG
    var recentPeers = RecentPeers()
    #else
    // Unchecked in release builds: read and written in place, nothing called meanwhile (see
    // docs/DESIGN.md §3, "Unchecked exclusivity").
    @exclusivity(unchecked) var recentPeers = RecentPeers()
    #endif

    // CURVE (DESIGN.md §7): the ZAP handler's socket and policy, and each peer's key.
    var zap: Socket?
    var zapPolicy: ZAPPolicy?
    /// The key (ZAP User-Id) each routing id first spoke with: a routing id is bound to its key.
    var peerKeys: [PeerID: String] = [:]
    /// The kind of the last SUBMIT read, for the next to take (a coordinator's tasks are mostly of
    /// one kind: see ``TaskEnvelope/decode(_:previousKind:)``). Kept across messages: a task sent
    /// alone made its kind's String anew (~240 instructions).
    var lastSubmitKind: String?
    var allowlistSignatures: (workers: String, coordinators: String) = ("", "")
    /// An allowlist read is in flight (off the reactor), and another was asked for meanwhile.
    var readingAllowlists = false
    var rereadAllowlists = false
    var refusedHandshakes = 0
    var securityLog = RateLimitedLog()
    /// The ROUTERs' monitors, for failed accepts (out of descriptors), by port; and how many were
    /// made (each needs its own inproc endpoint).
    var acceptMonitors: [String: Socket] = [:]
    var acceptArmings = 0
    /// When a port's monitor, disarmed after it reported, is armed again.
    var acceptPausedUntil: [String: ContinuousClock.Instant] = [:]

    // Durable mode (DESIGN.md §8).
    var journal: Journal?
    /// Records appended (a check that the journal's numbers are the machine's).
    var journaled: UInt64 = 0
    var compactedBytes = 0
    /// A journal write failed: ``run()`` ends with it.
    let journalFailures: AsyncStream<JournalError>
    let journalFailureSink: AsyncStream<JournalError>.Continuation
    /// The first journal failure, kept for ``run()`` when it comes while the broker stops.
    var journalFailure: JournalError?
    // HA mode (DESIGN.md §8b, `Broker+Group.swift`).
    /// This broker's membership of its group on etcd.
    var member: GroupMember?
    /// The term this member leads in (nil while it stands by).
    var term: Leadership.Term?
    /// The term's journal: etcd, written in transactions fenced on the term.
    var etcdJournal: EtcdJournal?
    var termTimer: TimerID?
    /// The timers of ``observe(every:_:)``.
    var observers: [TimerID] = []
    /// What the journal held when the broker started (nil without a journal).
    public internal(set) var recovered: Recovery?

    /// Creates a broker; ``start()`` or ``run()`` binds it.
    /// - Parameters:
    ///   - configuration: endpoints, heartbeats, limits and the journal (default: in memory, on
    ///     `tcp://*:5555` and `tcp://*:5556`).
    ///   - reactor: the reactor that runs the broker and owns its sockets.
    ///   - logger: where the broker logs (info and below; bad input at most a few times a second).
    public init(configuration: BrokerConfiguration = BrokerConfiguration(), reactor: Reactor, logger: Logger) {
        self.configuration = configuration
        self.reactor = reactor
        self.logger = logger
        let epoch = UInt32.random(in: 1...UInt32.max)
        self.epoch = epoch
        self.machine = BrokerMachine(rules: configuration.rules, epoch: epoch, logger: logger)
        (self.journalFailures, self.journalFailureSink) = AsyncStream.makeStream(of: JournalError.self)
    }

    /// The bound endpoints, once started.
    public var endpoints: Endpoints? {
        if case .running(_, _, let endpoints) = self.lifecycle { return endpoints }
        return nil
    }

    /// Alone, or the leader or a standby of its HA group (``status()`` says the latter two): cheap
    /// to ask often, unlike a status.
    public var role: Beacon.Role {
        guard self.configuration.group != nil else { return .single }
        return self.machine.standby == nil ? .leader : .standby
    }

    /// Calls `observer` with a fresh ``status()`` every `interval` (on the broker's reactor, so the
    /// observer must be quick: store the snapshot and return), until the broker stops. What the HTTP
    /// endpoint serves comes from here; the hot path pays nothing for it but its figures.
    public func observe(every interval: Duration, _ observer: @escaping @Sendable (BrokerStatus) -> Void) {
        observer(self.status())
        self.observers.append(
            self.reactor.schedule(after: interval, every: interval) { [weak self] in
                self?.assumeIsolated { broker in observer(broker.status()) }
            }
        )
    }

    /// A snapshot of workers, queues and figures (what `skynet status` prints).
    public func status() -> BrokerStatus {
        let now = ContinuousClock.now
        var status = BrokerStatus(
            state: self.machine.state,
            now: now,
            epoch: self.machine.epoch,
            badInput: self.machine.badInput,
            parked: self.frontOutbox.count + self.backOutbox.count,
            curve: self.zapPolicy != nil,
            allowed: (self.zapPolicy?.workers.count ?? 0, self.zapPolicy?.coordinators.count ?? 0),
            refusedHandshakes: self.refusedHandshakes,
            detachedJobs: self.machine.jobs.recent(limit: 100, now: now),
            journalCommit: self.journal?.commitHistogram,
            keys: self.peerKeys,
            detachedTotals: self.machine.jobs.totals
        )
        if let group = self.configuration.group {
            status.role = self.role.rawValue
            status.leader =
                self.machine.standby == nil ? group.advertisedFrontend : self.machine.standby?.leader?.frontend
        }
        return status
    }
}
