import Foundation

/// Who leads a group of brokers on etcd, as a pure state machine: the member's runner (a thread that
/// talks to etcd) asks ``next(now:)`` what to do, does it, and reports the outcome with the time it
/// sent the request. It touches no socket and reads no clock.
///
/// Rules (DESIGN.md §8b):
/// - **Campaign.** A member grants itself a lease of ``ttl`` and creates the leader key on it, in a
///   transaction that succeeds only if the key does not exist. The key's create revision is the
///   leader's **fence**: every write it makes is a transaction that compares it, so a deposed
///   leader's writes fail in etcd, whatever it believes.
/// - **Keep it.** A leader renews its lease every ``renewEvery`` (a third of the TTL).
/// - **Stop before etcd could.** A leader counts its lease from the moment it *sent* the last renewal
///   that etcd granted (etcd counts from when it received it, later), less ``safety``: past that it
///   says nothing more as a leader (``mayAct(now:)`` is false) and steps down, before the lease can
///   have expired on etcd's side. A paused process that wakes up finds its time gone the same way.
/// - **Standby.** A member that is not the leader reads the leader key to learn who is (and where,
///   for clients that ask it), and campaigns again every ``renewEvery``; it wins once the old
///   leader's lease has expired.
package struct Leadership: Sendable {
    /// What the leader key holds: who leads, and where its peers reach it.
    package struct Record: Codable, Sendable, Equatable {
        package var member: String
        package var frontend: String
        package var backend: String

        package init(member: String, frontend: String, backend: String) {
            self.member = member
            self.frontend = frontend
            self.backend = backend
        }
    }

    /// One term as leader.
    package struct Term: Sendable, Equatable {
        /// The lease the leader key lives on.
        package var lease: Int64
        /// The leader key's create revision: the fence every write of this term compares.
        package var fence: Int64
    }

    package enum Role: Sendable, Equatable {
        /// Not the leader; `leader` is who is, when known.
        case standby(leader: Record?)
        case leader(Term)
    }

    /// What the runner does next.
    package enum Step: Sendable, Equatable {
        /// Grant a lease of ``ttl``.
        case grantLease
        /// The transaction that creates the leader key on `lease` if there is none (and reads it
        /// otherwise).
        case campaign(lease: Int64)
        /// Renew `lease`.
        case keepAlive(lease: Int64)
        /// Nothing until then.
        case wait(until: ContinuousClock.Instant)
    }

    package let me: Record
    /// The leader key's time to live.
    package let ttl: Duration
    /// How much earlier than its lease a leader stops: the time a renewal may spend on its way.
    package let safety: Duration
    package var renewEvery: Duration { self.ttl / 3 }

    package private(set) var role = Role.standby(leader: nil)
    /// A granted lease not yet used in a campaign (a standby keeps one to campaign with).
    private var spareLease: (id: Int64, grantedAt: ContinuousClock.Instant)?
    /// As leader: when the term ends unless a renewal is granted first.
    package private(set) var validUntil: ContinuousClock.Instant?
    /// When the next campaign or renewal is due.
    private var due: ContinuousClock.Instant?
    /// The last call to etcd failed (the runner says so after a while).
    package private(set) var lastStepFailed = false
    /// The lease of a term that ended here (stepped down, expired, or given up), for the runner to
    /// revoke, best effort. Left alone it would live on, and etcd gives every lease its whole time
    /// to live again when etcd itself elects a new leader (the usual reason a renewal failed):
    /// seconds more with no leader (a CI run's etcd fault saw a 10.3 s gap).
    private var endedLease: Int64?

    /// - Parameters:
    ///   - me: this member, as the leader key will say it.
    ///   - ttl: the lease's time to live (at least 2 s: etcd's own floor is near 1.5 s).
    ///   - safety: how much earlier than the lease a leader stops (a third of the TTL by default).
    package init(me: Record, ttl: Duration = .seconds(5), safety: Duration? = nil) {
        self.me = me
        self.ttl = max(ttl, .seconds(2))
        self.safety = safety ?? self.ttl / 3
    }

    package var isLeader: Bool { if case .leader = self.role { true } else { false } }

    /// Whether this member may act as the leader now: accept, dispatch, acknowledge.
    package func mayAct(now: ContinuousClock.Instant) -> Bool {
        guard self.isLeader, let validUntil = self.validUntil else { return false }
        return now < validUntil
    }

    /// What to do next. A leader whose time is up steps down here first.
    package mutating func next(now: ContinuousClock.Instant) -> Step {
        if case .leader(let term) = self.role {
            if !self.mayAct(now: now) {
                self.stepDown()
                return .grantLease
            }
            if let due = self.due, now < due { return .wait(until: min(due, self.validUntil ?? due)) }
            return .keepAlive(lease: term.lease)
        }
        if let due = self.due, now < due { return .wait(until: due) }
        // A spare lease may have expired meanwhile: campaign only with one young enough.
        if let spare = self.spareLease, now - spare.grantedAt < self.ttl - self.safety {
            return .campaign(lease: spare.id)
        }
        self.spareLease = nil
        return .grantLease
    }

    /// etcd granted a lease (the request was sent at `sentAt`).
    package mutating func leaseGranted(_ id: Int64, sentAt: ContinuousClock.Instant) {
        self.lastStepFailed = false
        self.spareLease = (id, sentAt)
        self.due = nil
    }

    /// The campaign's transaction answered: `won` with the key's create revision, or lost to
    /// `leader` (nil when the key vanished between the compare and the read).
    package mutating func campaigned(
        won: Bool,
        fence: Int64,
        leader: Record?,
        sentAt: ContinuousClock.Instant
    ) {
        self.lastStepFailed = false
        guard let spare = self.spareLease else { return }
        if won {
            self.spareLease = nil
            self.role = .leader(Term(lease: spare.id, fence: fence))
            // The lease was granted at or after `spare.grantedAt`; it lives `ttl` from then at least.
            // A spare lease may be most of a period old: its first renewal is due a period after its
            // grant (at once, perhaps), not after the campaign, or the term could end before it.
            self.validUntil = spare.grantedAt + self.ttl - self.safety
            self.due = spare.grantedAt + self.renewEvery
        } else {
            self.role = .standby(leader: leader)
            self.due = sentAt + self.renewEvery
        }
    }

    /// A renewal answered: the lease lives `ttl` seconds more from when it was sent, or is gone (0).
    package mutating func keptAlive(ttlSeconds: Int64, sentAt: ContinuousClock.Instant) {
        self.lastStepFailed = false
        guard case .leader = self.role else { return }
        guard ttlSeconds > 0 else {
            self.stepDown()
            return
        }
        self.validUntil = sentAt + .seconds(ttlSeconds) - self.safety
        self.due = sentAt + self.renewEvery
    }

    /// A call to etcd failed (unreachable, no answer in time): try again shortly. A leader keeps its
    /// role only until its time is up (``next(now:)`` then steps down).
    package mutating func failed(now: ContinuousClock.Instant) {
        self.lastStepFailed = true
        self.due = now + min(self.renewEvery, .milliseconds(500))
    }

    /// The lease to revoke now, once: that of the term that ended since the last call.
    package mutating func takeEndedLease() -> Int64? { self.endedLease.take() }

    /// Gives up the leadership at once (its lease is then revoked by the runner, best effort:
    /// ``takeEndedLease()``). Every way a term ends comes through here.
    package mutating func stepDown() {
        if case .leader(let term) = self.role { self.endedLease = term.lease }
        self.role = .standby(leader: nil)
        self.validUntil = nil
        self.due = nil
        self.spareLease = nil
    }

    /// The leader key's value for this member.
    package var recordBytes: [UInt8] { Array((try? JSONEncoder().encode(self.me)) ?? Data()) }

    /// Reads a leader key's value.
    package static func record(from bytes: [UInt8]) -> Record? {
        try? JSONDecoder().decode(Record.self, from: Data(bytes))
    }
}
