import Logging
import SkyNetCore
import ZeroMQ

// HA mode (DESIGN.md §8b): the broker as a member of a group on etcd. It binds its ports and stands
// by (its machine answers every peer "not the leader", and where the leader is) until its
// ``GroupMember`` wins a term; then a fresh machine recovers what etcd holds and serves, with etcd as
// its journal (every write fenced on the term). When the term ends (the lease was not renewed in
// time, the journal was fenced off or could not reach etcd) the broker stops at once, as a crash
// would: peers are told "not the leader", nothing more it says counts, and a fresh standby machine
// takes the old one's place. Nothing that machine promised is lost: it promised only what etcd held.
extension Broker {
    /// How often a leader checks that its term still runs, besides its member's thread (which may be
    /// stuck in a call to an etcd member that does not answer).
    static let termCheckInterval = Duration.milliseconds(100)

    /// Joins the group: checks that etcd answers, then campaigns on the member's thread.
    func joinGroup(_ group: BrokerGroup) throws(EtcdError) {
        self.machine.standBy(leader: nil)
        self.member = try GroupMember(
            group: group,
            logger: self.logger,
            onLead: { [weak self] term, recovery in
                guard let self else { return }
                Task { await self.lead(term, recovery: recovery) }
            },
            onStandBy: { [weak self] reason, fence in
                guard let self, let reason else { return }
                // With the term's fence: a report that comes after the next term began ends nothing.
                Task { await self.termEnded(reason, fence: fence ?? -1) }
            },
            onLeaderKnown: { [weak self] leader in
                guard let self else { return }
                Task { await self.leaderKnown(leader) }
            }
        )
        self.logger.info(
            "standing by in the group",
            metadata: [
                "cluster": "\(group.cluster)", "etcd": "\(group.etcd.joined(separator: ","))",
                "advertised.frontend": "\(group.advertisedFrontend)",
                "advertised.backend": "\(group.advertisedBackend)",
            ]
        )
    }

    /// The member won a term: a fresh machine recovers etcd's journal and serves.
    func lead(_ term: Leadership.Term, recovery: JournalRecovery) {
        guard case .running = self.lifecycle, let group = self.configuration.group, let member = self.member,
            self.term == nil, member.mayLead(now: .now)
        else { return }
        let fence = term.fence
        let logger = self.logger
        let journal: EtcdJournal
        do throws(EtcdError) {
            journal = try EtcdJournal(
                endpoints: group.etcd,
                layout: EtcdJournalLayout(cluster: group.cluster),
                fence: fence,
                giveUpAfter: group.leaseTTL,
                tls: group.tls,
                onCommit: { [weak self] seq in
                    guard let self else { return }
                    Task { await self.etcdCommitted(seq, fence: fence) }
                },
                onFailure: { [weak self] error in
                    logger.critical("the etcd journal failed", metadata: ["error": "\(error)"])
                    guard let self else { return }
                    Task { await self.termEnded("its journal failed: \(error.message)", fence: fence, resign: true) }
                }
            )
        } catch {
            self.logger.error("cannot start the etcd journal; giving the term up", metadata: ["error": "\(error)"])
            member.resign()
            return
        }
        self.term = term
        self.etcdJournal = journal
        self.journaled = 0
        self.machine = BrokerMachine(rules: self.configuration.rules, epoch: Self.newEpoch(), logger: self.logger)
        self.machine.lead()
        let queued = self.recover(recovery)
        self.termTimer = self.reactor.schedule(after: Self.termCheckInterval, every: Self.termCheckInterval) {
            [weak self] in
            self?.assumeIsolated { broker in
                guard broker.term != nil, broker.member?.mayLead(now: .now) != true else { return }
                broker.termEnded("its lease was not renewed in time (etcd unreachable, or this process paused)")
            }
        }
        self.logger.notice(
            "leading: serving",
            metadata: [
                "fence": "\(fence)", "queued": "\(queued)", "results": "\(recovery.results.count)",
                "epoch": "\(self.machine.epoch)",
            ]
        )
        self.performEffects()
    }

    /// A commit of the etcd journal of the term `fence` (one that ended is ignored).
    func etcdCommitted(_ seq: UInt64, fence: Int64) {
        guard self.term?.fence == fence else { return }
        self.journalCommitted(seq)
    }

    /// The term ended (or, with `fence`, that term's journal failed): stop at once, tell the peers,
    /// and stand by with a fresh machine.
    func termEnded(_ reason: String, fence: Int64? = nil, resign: Bool = false) {
        guard let term = self.term, fence == nil || fence == term.fence else { return }
        self.logger.error("no longer the leader: \(reason); standing by")
        if resign { self.member?.resign() }
        self.term = nil
        if let timer = self.termTimer { self.reactor.cancel(timer) }
        self.termTimer = nil
        self.etcdJournal?.abandon()
        self.etcdJournal = nil
        if case .running(let frontend, let backend, _) = self.lifecycle {
            // What waits for the journal is never sent: it was not promised. The peers hear at once
            // that this member does not lead (nothing it says from here counts), and look elsewhere.
            let goodbye = WireMessage.disconnect(.notLeader, text: "").encode()
            let (workers, coordinators) = self.machine.connectedPeers
            for worker in workers { _ = try? backend.send([worker.bytes] + goodbye) }
            for coordinator in coordinators { _ = try? frontend.send([coordinator.bytes] + goodbye) }
        }
        for timer in [self.flushTimer, self.acceptedTimer, self.bulkTimer] {
            if let timer { self.reactor.cancel(timer) }
        }
        (self.flushTimer, self.acceptedTimer, self.bulkTimer) = (nil, nil, nil)
        self.acceptedHoldArmed = false
        self.frontOutbox.removeAll()
        self.backOutbox.removeAll()
        self.effectBuffer.removeAll()
        self.machine = BrokerMachine(rules: self.configuration.rules, epoch: Self.newEpoch(), logger: self.logger)
        self.machine.standBy(leader: nil)
    }

    /// A standby learned who leads: what it tells peers from now.
    func leaderKnown(_ leader: Leadership.Record?) {
        guard self.term == nil, self.machine.standby != nil else { return }
        self.machine.standBy(leader: leader)
        if let leader {
            self.logger.info(
                "standing by",
                metadata: ["leader": "\(leader.frontend)", "leader.member": "\(leader.member)"]
            )
        }
    }

    /// Leaves the group: a leader's journal is committed first, then its lease revoked (a standby
    /// takes over at once).
    func leaveGroup() {
        if let timer = self.termTimer { self.reactor.cancel(timer) }
        self.termTimer = nil
        if let failure = self.etcdJournal?.close() {
            self.logger.error("the etcd journal failed while stopping", metadata: ["error": "\(failure)"])
        }
        self.etcdJournal = nil
        self.term = nil
        self.member?.stop()
        self.member = nil
    }

    static func newEpoch() -> UInt32 { UInt32.random(in: 1...UInt32.max) }
}
