import Dispatch
import Glibc
import Logging
import SkyNetCore
import Synchronization

/// A broker's membership of an HA group (DESIGN.md §8b): a thread of its own that campaigns for the
/// leader key and keeps it (``Leadership`` through ``LeadershipRunner``), and tells the broker when
/// it wins (with what etcd's journal holds, read before it serves), when it loses, and who leads
/// while it stands by.
///
/// The thread may be stuck in a call to an etcd member that does not answer: the broker does not
/// wait for it to notice a term's end. ``mayLead(now:)`` says whether the term still runs, from
/// the time the last granted renewal was sent, and the broker checks it on a timer of its own.
final class GroupMember: Sendable {
    private let group: BrokerGroup
    private let layout: EtcdJournalLayout
    private let me: Leadership.Record
    private let logger: Logger
    /// As leader: when this member's term ends unless a renewal is granted before.
    private let termEnds = Mutex<ContinuousClock.Instant?>(nil)
    private let stopping = Atomic<Bool>(false)
    /// The broker asked to give the term up (its journal failed).
    private let resigning = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let onLead: @Sendable (Leadership.Term, JournalRecovery) -> Void
    private let onStandBy: @Sendable (_ reason: String?, _ fence: Int64?) -> Void
    private let onLeaderKnown: @Sendable (Leadership.Record?) -> Void

    /// Checks that etcd answers (within a few seconds), then starts the member's thread.
    /// - Parameters:
    ///   - onLead: this member won a term; etcd's journal as it was read after the win.
    ///   - onStandBy: this member's term (`fence`) ended (why), or it is a standby from the start
    ///     (nil, nil). The fence tells a late report of an old term from the end of the current one.
    ///   - onLeaderKnown: a standby learned who leads (nil: nobody now).
    /// - Throws: ``EtcdError`` when no etcd member answers or an endpoint is not `http://host:port`.
    init(
        group: BrokerGroup,
        logger: Logger,
        onLead: @escaping @Sendable (Leadership.Term, JournalRecovery) -> Void,
        onStandBy: @escaping @Sendable (String?, Int64?) -> Void,
        onLeaderKnown: @escaping @Sendable (Leadership.Record?) -> Void
    ) throws(EtcdError) {
        self.group = group
        self.layout = EtcdJournalLayout(cluster: group.cluster)
        self.me = Leadership.Record(
            member: "\(WorkerFigures.hostName)/\(getpid())",
            frontend: group.advertisedFrontend,
            backend: group.advertisedBackend
        )
        self.logger = logger
        self.onLead = onLead
        self.onStandBy = onStandBy
        self.onLeaderKnown = onLeaderKnown
        // A wrong address fails here, in seconds, with what to do, not in a loop of retries.
        let probe = try EtcdClient(endpoints: group.etcd, timeout: .seconds(2), tls: group.tls)
        defer { probe.close() }
        do throws(EtcdError) {
            _ = try probe.range(EtcdAPI.RangeRequest(key: self.layout.leaderKey))
        } catch {
            throw EtcdError(
                error.code,
                "cannot reach etcd at \(group.etcd.joined(separator: ",")): \(error.message); is etcd running there (its client port, 2379 by default)?"
            )
        }
        if let rc = POSIX.detachedThread({ self.run() }) {
            throw EtcdError(.unavailable, "cannot start the group member's thread (errno \(rc))")
        }
    }

    /// This member's leader record (what the leader key says while it leads).
    var record: Leadership.Record { self.me }

    /// Whether this member's term still runs (false when it stands by).
    func mayLead(now: ContinuousClock.Instant) -> Bool {
        guard let ends = self.termEnds.withLock({ $0 }) else { return false }
        return now < ends
    }

    /// Gives the term up (the broker's journal failed): the lease is revoked, and the member stands
    /// by, campaigning again after a while.
    func resign() { self.resigning.store(true, ordering: .relaxed) }

    /// Stops the thread; a leader revokes its lease first, so that a standby takes over at once.
    func stop() {
        guard !self.stopping.exchange(true, ordering: .relaxed) else { return }
        self.done.wait()
    }

    private func run() {
        defer { self.done.signal() }
        guard let client = try? EtcdClient(endpoints: self.group.etcd, timeout: .seconds(1), tls: self.group.tls) else {
            return
        }
        defer { client.close() }
        var leadership = Leadership(me: self.me, ttl: self.group.leaseTTL)
        let key = self.layout.leaderKey
        var knownLeader: Leadership.Record?
        var unreachable = RateLimitedLog(perSecond: 1)
        var failingSince: ContinuousClock.Instant?
        self.onStandBy(nil, nil)
        while !self.stopping.load(ordering: .relaxed) {
            if self.resigning.exchange(false, ordering: .relaxed), case .leader(let term) = leadership.role {
                self.endTerm(&leadership, term, reason: nil)
                self.revokeEndedLease(&leadership, client: client)
            }
            let wasLeader = leadership.isLeader
            let termBefore: Leadership.Term? = if case .leader(let term) = leadership.role { term } else { nil }
            let step = LeadershipRunner.step(&leadership, key: key, client: client)
            let now = ContinuousClock.now
            if case .wait = step {
                failingSince = nil
            } else if leadership.lastStepFailed {
                failingSince = failingSince ?? now
                if let since = failingSince, now - since > .seconds(2) {
                    unreachable.log(
                        self.logger,
                        level: .warning,
                        "cannot reach etcd at \(self.group.etcd.joined(separator: ",")); \(wasLeader ? "leading until the lease runs out" : "standing by"), retrying"
                    )
                }
            } else {
                failingSince = nil
            }
            switch (wasLeader, leadership.role) {
            case (false, .leader(let term)):
                self.won(term, &leadership, client: client)
            case (true, .standby):
                self.endTerm(
                    &leadership,
                    termBefore,
                    reason: "its lease was not renewed in time (etcd unreachable, or this process paused)"
                )
            case (true, .leader):
                self.termEnds.withLock { $0 = leadership.validUntil }
            case (false, .standby(let leader)):
                if leader != knownLeader {
                    knownLeader = leader
                    self.onLeaderKnown(leader)
                }
            }
            // However the term ended here (the broker has stopped), its lease goes too, so that a
            // member can win now.
            self.revokeEndedLease(&leadership, client: client)
            if case .wait(let until) = step {
                let pause = min(max(until - ContinuousClock.now, .zero), .milliseconds(100))
                if pause > .zero { usleep(UInt32(pause.microseconds)) }
            }
        }
        if leadership.isLeader {
            self.termEnds.withLock { $0 = nil }
            leadership.stepDown()
        }
        self.revokeEndedLease(&leadership, client: client)
    }

    /// Revokes the lease of a term that ended here, best effort (``Leadership/takeEndedLease()``).
    private func revokeEndedLease(_ leadership: inout Leadership, client: EtcdClient) {
        if let lease = leadership.takeEndedLease() { try? client.revokeLease(lease) }
    }

    /// Won a term: read what etcd's journal holds (the old leader can write nothing more: its writes
    /// are fenced on a key that is gone), then lead.
    private func won(_ term: Leadership.Term, _ leadership: inout Leadership, client: EtcdClient) {
        self.termEnds.withLock { $0 = leadership.validUntil }
        let range = self.layout.journalRange
        let began = ContinuousClock.now
        do throws(EtcdError) {
            let values = try client.rangeAll(key: range.key, end: range.end)
            let recovery = self.layout.recovery(from: values)
            // Attempt keys whose task is gone: deleted now, fenced on this term, 100 at a time.
            let orphans = self.layout.orphanAttempts(in: values)
            for start in stride(from: 0, to: orphans.count, by: 100) {
                let reply = try client.txn(
                    EtcdAPI.TxnRequest(
                        compare: [.createRevision(key: self.layout.leaderKey, equals: term.fence)],
                        success: orphans[start..<min(start + 100, orphans.count)].map {
                            .deleteRange(key: $0, rangeEnd: nil)
                        }
                    )
                )
                guard reply.succeeded else { throw EtcdError(.refused, "another member leads already") }
            }
            guard leadership.mayAct(now: .now) else {
                self.endTerm(&leadership, term, reason: "reading the journal took longer than the term")
                return
            }
            self.logger.notice(
                "leading the group",
                metadata: [
                    "cluster": "\(self.group.cluster)", "fence": "\(term.fence)", "keys": "\(values.count)",
                    "orphans.deleted": "\(orphans.count)",
                    "read.took": "\(DurationParser.format(ContinuousClock.now - began))",
                ]
            )
            self.onLead(term, recovery)
        } catch {
            self.logger.error(
                "won the leadership but cannot read the journal; standing by",
                metadata: ["error": "\(error)"]
            )
            self.endTerm(&leadership, term, reason: nil)
            try? client.revokeLease(term.lease)
        }
    }

    private func endTerm(_ leadership: inout Leadership, _ term: Leadership.Term?, reason: String?) {
        leadership.stepDown()
        self.termEnds.withLock { $0 = nil }
        self.onStandBy(reason ?? "it gave the term up", term?.fence)
    }
}
