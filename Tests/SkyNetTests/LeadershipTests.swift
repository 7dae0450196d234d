import Testing

@testable import SkyNetCore

/// The election's rules with a test clock (the integration tests run it against real etcd).
@Suite("Leadership: campaign, renew, and stop before etcd could")
struct LeadershipTests {
    let t0 = ContinuousClock.now
    let me = Leadership.Record(member: "a", frontend: "tcp://a:5555", backend: "tcp://a:5556")

    @Test("grant, campaign, lead; renew every third of the TTL; a leader stops safety before its lease ends")
    func lead() {
        var leadership = Leadership(me: self.me, ttl: .seconds(6), safety: .seconds(1))
        #expect(leadership.next(now: self.t0) == .grantLease)
        leadership.leaseGranted(11, sentAt: self.t0)
        #expect(leadership.next(now: self.t0) == .campaign(lease: 11))
        leadership.campaigned(won: true, fence: 42, leader: nil, sentAt: self.t0)
        #expect(leadership.role == .leader(.init(lease: 11, fence: 42)))
        #expect(leadership.mayAct(now: self.t0 + .seconds(4)))
        #expect(!leadership.mayAct(now: self.t0 + .seconds(5)), "5 s = 6 s of lease less 1 s of safety")
        #expect(leadership.next(now: self.t0 + .seconds(1)) == .wait(until: self.t0 + .seconds(2)))
        #expect(leadership.next(now: self.t0 + .seconds(2)) == .keepAlive(lease: 11))
        leadership.keptAlive(ttlSeconds: 6, sentAt: self.t0 + .seconds(2))
        #expect(leadership.mayAct(now: self.t0 + .milliseconds(6900)), "renewed from when the renewal was sent")
        #expect(!leadership.mayAct(now: self.t0 + .seconds(7)))
    }

    @Test("a leader that cannot renew (etcd unreachable, or it was paused) steps down when its time is up")
    func stepDown() {
        var leadership = Leadership(me: self.me, ttl: .seconds(3), safety: .seconds(1))
        leadership.leaseGranted(5, sentAt: self.t0)
        _ = leadership.next(now: self.t0)
        leadership.campaigned(won: true, fence: 9, leader: nil, sentAt: self.t0)
        leadership.failed(now: self.t0 + .seconds(1))
        #expect(leadership.isLeader && leadership.mayAct(now: self.t0 + .seconds(1)))
        // Woken past its time (a SIGSTOP, a slow disk): it acts no more, and campaigns anew.
        #expect(!leadership.mayAct(now: self.t0 + .seconds(2)))
        #expect(leadership.next(now: self.t0 + .seconds(30)) == .grantLease)
        #expect(leadership.role == .standby(leader: nil))
        // A renewal refused (the lease is gone on etcd's side): the same.
        var other = Leadership(me: self.me, ttl: .seconds(3))
        other.leaseGranted(6, sentAt: self.t0)
        other.campaigned(won: true, fence: 10, leader: nil, sentAt: self.t0)
        other.keptAlive(ttlSeconds: 0, sentAt: self.t0 + .seconds(1))
        #expect(!other.isLeader)
    }

    @Test("a term that ends here hands its lease over to be revoked, once; a standby has none")
    func endedLease() {
        var leadership = Leadership(me: self.me, ttl: .seconds(3), safety: .seconds(1))
        #expect(leadership.takeEndedLease() == nil)
        leadership.leaseGranted(5, sentAt: self.t0)
        leadership.campaigned(won: true, fence: 9, leader: nil, sentAt: self.t0)
        #expect(leadership.takeEndedLease() == nil, "a term that goes on keeps its lease")
        // Its time runs out (etcd unreachable): the term ends here, and its lease is to be revoked.
        #expect(leadership.next(now: self.t0 + .seconds(30)) == .grantLease)
        #expect(leadership.takeEndedLease() == 5)
        #expect(leadership.takeEndedLease() == nil, "once")
        leadership.stepDown()
        #expect(leadership.takeEndedLease() == nil, "a standby that steps down had no term")
        // A renewal refused (the lease is gone on etcd's side), and a term given up: the same.
        leadership.leaseGranted(6, sentAt: self.t0 + .seconds(30))
        leadership.campaigned(won: true, fence: 10, leader: nil, sentAt: self.t0 + .seconds(30))
        leadership.keptAlive(ttlSeconds: 0, sentAt: self.t0 + .seconds(31))
        #expect(leadership.takeEndedLease() == 6)
        leadership.leaseGranted(7, sentAt: self.t0 + .seconds(32))
        leadership.campaigned(won: true, fence: 11, leader: nil, sentAt: self.t0 + .seconds(32))
        leadership.stepDown()
        #expect(leadership.takeEndedLease() == 7)
    }

    @Test("a standby learns the leader, campaigns again each period, and never with a lease too old")
    func standby() {
        var leadership = Leadership(me: self.me, ttl: .seconds(3), safety: .seconds(1))
        leadership.leaseGranted(7, sentAt: self.t0)
        let other = Leadership.Record(member: "b", frontend: "tcp://b:5555", backend: "tcp://b:5556")
        leadership.campaigned(won: false, fence: 3, leader: other, sentAt: self.t0)
        #expect(leadership.role == .standby(leader: other) && !leadership.mayAct(now: self.t0))
        #expect(leadership.next(now: self.t0) == .wait(until: self.t0 + .seconds(1)))
        #expect(leadership.next(now: self.t0 + .seconds(1)) == .campaign(lease: 7), "its lease is 1 s old")
        #expect(leadership.next(now: self.t0 + .seconds(2)) == .grantLease, "2 s old: too near its end to lead on")
    }

    @Test("the leader key's value round-trips")
    func record() {
        let leadership = Leadership(me: self.me)
        #expect(Leadership.record(from: leadership.recordBytes) == self.me)
        #expect(Leadership.record(from: Array("garbage".utf8)) == nil)
    }
}
