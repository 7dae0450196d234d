@testable import SkyNet
@testable import SkyNetCore
import Testing

@Suite("Beacon")
struct BeaconTests {
    let key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
    let other = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"

    func parse(_ text: String) -> Result<Beacon, BeaconError> { Beacon.parse(Array(text.utf8)) }

    @Test("a beacon's text parses back to it, with and without a key")
    func roundTrip() {
        for key in [self.key, nil] {
            let beacon = Beacon(role: .standby, frontend: "tcp://*:5555", backend: "tcp://10.0.0.1:6000", key: key)
            #expect(self.parse(beacon.text) == .success(beacon))
        }
    }

    @Test("unknown fields are skipped; a malformed datagram is refused with a reason")
    func malformed() {
        let good = "SKYNET/1 role=single frontend=tcp://*:5555 backend=tcp://*:5556 key=-"
        #expect((try? self.parse(good + " later=field").get())?.role == .single)
        let cases: [(String, String)] = [
            ("ZRE\u{1}", "not one line"),
            ("SKYNET/2 role=single frontend=tcp://*:5555 backend=tcp://*:5556 key=-", "does not start"),
            ("SKYNET/1 role=boss frontend=tcp://*:5555 backend=tcp://*:5556 key=-", "no valid role"),
            ("SKYNET/1 role=single frontend=tcp://*:0 backend=tcp://*:5556 key=-", "frontend and backend"),
            ("SKYNET/1 role=single frontend=ipc:///x backend=tcp://*:5556 key=-", "frontend and backend"),
            ("SKYNET/1 role=single frontend=tcp://*:5555 backend=tcp://*:5556", "no key"),
            ("SKYNET/1 role=single frontend=tcp://*:5555 backend=tcp://*:5556 key=short", "40 characters"),
            (good + " role=leader", "given twice"),
            ("SKYNET/1 role=single  frontend=tcp://*:5555 backend=tcp://*:5556 key=-", "malformed field"),
            (good + String(repeating: " x=y", count: 200), "longer than"),
        ]
        for (text, reason) in cases {
            guard case .failure(let error) = self.parse(text) else {
                Issue.record("accepted: \(text)")
                continue
            }
            #expect(error.description.contains(reason), "\(text): \(error)")
        }
    }

    @Test("* and 0.0.0.0 stand for the sender's address")
    func resolve() {
        #expect(Beacon.resolve("tcp://*:5556", sender: "10.1.2.3") == "tcp://10.1.2.3:5556")
        #expect(Beacon.resolve("tcp://0.0.0.0:5556", sender: "10.1.2.3") == "tcp://10.1.2.3:5556")
        #expect(Beacon.resolve("tcp://broker.lan:5556", sender: "10.1.2.3") == "tcp://broker.lan:5556")
    }

    @Test("trust: with CURVE only a pinned key, from anywhere; without, only loopback unless insecure")
    func trust() {
        let signed = Beacon(role: .single, frontend: "tcp://*:1", backend: "tcp://*:2", key: self.key)
        let impostor = Beacon(role: .single, frontend: "tcp://*:1", backend: "tcp://*:2", key: self.other)
        let plain = Beacon(role: .single, frontend: "tcp://*:1", backend: "tcp://*:2", key: nil)
        let curve = BeaconTrust(keys: [self.key], insecure: false)
        #expect(curve.problem(with: signed, sender: "10.0.0.9") == nil)
        #expect(curve.problem(with: impostor, sender: "127.0.0.1")?.contains("not one of --broker-key's") == true)
        #expect(curve.problem(with: plain, sender: "127.0.0.1")?.contains("announces no CURVE key") == true)
        // --insecure does not make an unpinned key trusted.
        #expect(BeaconTrust(keys: [self.key], insecure: true).problem(with: impostor, sender: "10.0.0.9") != nil)
        let open = BeaconTrust(keys: nil, insecure: false)
        #expect(open.problem(with: plain, sender: "127.0.0.1") == nil)
        #expect(open.problem(with: plain, sender: "10.0.0.9")?.contains("only brokers on this host") == true)
        #expect(open.problem(with: signed, sender: "127.0.0.1")?.contains("uses CURVE") == true)
        #expect(BeaconTrust(keys: nil, insecure: true).problem(with: plain, sender: "10.0.0.9") == nil)
        // A loopback endpoint is reachable only from the broker's own host.
        let local = Beacon(role: .single, frontend: "tcp://127.0.0.1:1", backend: "tcp://*:2", key: self.key)
        #expect(curve.problem(with: local, sender: "127.0.0.1") == nil)
        #expect(curve.problem(with: local, sender: "10.0.0.9")?.contains("which no other host can reach") == true)
    }

    @Test(
        "follow: the single broker heard first; an HA group's members once its leader is heard, leader first, with its key"
    )
    func follow() {
        let start = ContinuousClock.now
        func heard(_ role: Beacon.Role, _ host: String, _ key: String?, after seconds: Int) -> HeardBroker {
            let beacon = Beacon(role: role, frontend: "tcp://*:5555", backend: "tcp://*:5556", key: key)
            let at = start + .seconds(seconds)
            return HeardBroker(
                beacon: beacon,
                sender: host,
                frontend: "tcp://\(host):5555",
                backend: "tcp://\(host):5556",
                firstHeard: at,
                lastHeard: at
            )
        }
        #expect(HeardBroker.follow([], workers: true) == nil)
        let singles = [heard(.single, "a", nil, after: 0), heard(.single, "b", nil, after: 1)]
        #expect(HeardBroker.follow(singles, workers: true)?.endpoints == "tcp://a:5556")
        #expect(HeardBroker.follow(singles, workers: false)?.endpoints == "tcp://a:5555")
        let group = [
            heard(.single, "s", self.other, after: 0), heard(.standby, "x", self.key, after: 1),
            heard(.leader, "y", self.key, after: 2), heard(.standby, "z", self.other, after: 3),
        ]
        let followed = HeardBroker.follow(group, workers: true)
        #expect(followed?.endpoints == "tcp://y:5556,tcp://x:5556")
        #expect(followed?.key == self.key)
        // Standbys without their leader: not yet (the single one is not theirs to stand in for).
        let standbys = [heard(.standby, "x", self.key, after: 1), heard(.standby, "z", self.key, after: 2)]
        #expect(HeardBroker.follow(standbys, workers: true) == nil)
        #expect(
            HeardBroker.follow(standbys + [heard(.single, "s", nil, after: 3)], workers: true)?.endpoints
                == "tcp://s:5556"
        )
    }
}
