import Foundation
import Glibc
import Testing
import ZeroMQ

@testable import SkyNet
@testable import SkyNetCore

/// Keys, certificates, allowlists and the ZAP decisions: pure logic and files, no broker.
@Suite("CURVE keys, certificates, allowlists and ZAP decisions")
struct SecurityTests {
    func temporaryDirectory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-sec-\(UUID())").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func mode(_ path: String) -> mode_t {
        var info = stat()
        _ = stat(path, &info)
        return info.st_mode & 0o777
    }

    @Test("key pairs: Z85, the public key derived from the secret, and libzmq's published test keys")
    func keys() throws {
        #expect(Curve.isAvailable)
        let (publicKey, secretKey) = try Curve.keyPair()
        #expect(Curve.isKey(publicKey) && Curve.isKey(secretKey) && publicKey != secretKey)
        #expect(Curve.publicKey(forSecretKey: secretKey) == publicKey)
        #expect(Curve.text(ofKey: try #require(Curve.bytes(ofKey: publicKey))) == publicKey)
        for bad in ["", "short", String(repeating: "a", count: 39), String(repeating: "\"", count: 40)] {
            #expect(!Curve.isKey(bad), "\(bad)")
        }
        // zmq_curve(7)'s server pair is a real pair: the list SkyNet refuses holds the right keys.
        #expect(
            Curve.publicKey(forSecretKey: "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6")
                == "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
        )
        #expect(
            Curve.publicKey(forSecretKey: "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs")
                == "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
        )
    }

    @Test("the core's Z85 (what the ZAP policy reads a key with) writes what libzmq writes")
    func z85MatchesLibzmq() {
        for _ in 0..<200 {
            let key = (0..<32).map { _ in UInt8.random(in: 0...255) }
            #expect(Z85.encode(key) == Curve.text(ofKey: key))
        }
        #expect(Z85.encode([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]) == "HelloWorld", "RFC 32's example")
        #expect(Z85.encode([1, 2, 3]) == nil)
    }

    @Test("keygen files: NAME.key 0644 and NAME.key_secret 0600, never overwritten without force, read back")
    func certificateFiles() throws {
        let directory = try self.temporaryDirectory()
        let certificate = try CurveCertificate.generate(name: "worker-a")
        let (publicPath, secretPath) = try certificate.write(name: "worker-a", directory: directory, force: false)
        #expect(self.mode(publicPath) == 0o644 && self.mode(secretPath) == 0o600)
        #expect(try CurveCertificate.loadPublic(path: publicPath).publicKey == certificate.publicKey)
        #expect(try CurveCertificate.loadPublic(path: publicPath).secretKey == nil)
        let secret = try CurveCertificate.loadSecret(path: secretPath)
        #expect(secret.secretKey == certificate.secretKey && secret.metadata["name"] == "worker-a")
        #expect(!(try String(contentsOfFile: publicPath, encoding: .utf8)).contains(certificate.secretKey!))
        #expect(throws: SecurityError.self) {
            try certificate.write(name: "worker-a", directory: directory, force: false)
        }
        let other = try CurveCertificate.generate(name: "worker-a")
        _ = try other.write(name: "worker-a", directory: directory, force: true)
        #expect(try CurveCertificate.loadSecret(path: secretPath).publicKey == other.publicKey)
        // A secret file others can read is refused, as ssh refuses such a private key.
        chmod(secretPath, 0o644)
        let error = #expect(throws: SecurityError.self) { try CurveCertificate.loadSecret(path: secretPath) }
        #expect(error?.code == .permissions && error?.message.contains("chmod 600") == true)
        // A public certificate is no secret one.
        #expect(throws: SecurityError.self) { try CurveCertificate.loadSecret(path: publicPath) }
    }

    @Test("certificates as czmq and pyzmq write them parse; a mismatched or missing key is an error")
    func parsing() throws {
        let (publicKey, secretKey) = try Curve.keyPair()
        let czmq = """
            #   ****  Generated on 2026-01-01 by CZMQ  ****
            #   ZeroMQ CURVE **Secret** Certificate

            metadata
                name = worker-x
            curve
                public-key = "\(publicKey)"
                secret-key = "\(secretKey)"
            """
        let parsed = try CurveCertificate.parse(czmq, source: "czmq")
        #expect(parsed.publicKey == publicKey && parsed.secretKey == secretKey && parsed.metadata["name"] == "worker-x")
        let round = try CurveCertificate.parse(parsed.text(secret: true), source: "round trip")
        #expect(round == parsed)
        let (_, otherSecret) = try Curve.keyPair()
        let mismatched = czmq.replacingOccurrences(of: secretKey, with: otherSecret)
        #expect(throws: SecurityError.self) { try CurveCertificate.parse(mismatched, source: "x") }
        #expect(throws: SecurityError.self) { try CurveCertificate.parse("metadata\ncurve\n", source: "x") }
        #expect(throws: SecurityError.self) { try CurveCertificate.parse("not a certificate", source: "x") }
    }

    @Test("an allowlist reads every certificate in its directory, skips secrets, and notices changes")
    func allowlist() throws {
        let directory = try self.temporaryDirectory()
        let a = try CurveCertificate.generate(name: "a")
        let b = try CurveCertificate.generate(name: "b")
        _ = try a.write(name: "a", directory: directory, force: false)  // a.key and a.key_secret
        _ = try b.writePublic(name: "b", directory: directory)
        let before = Allowlist.signature(of: directory)
        let list = try Allowlist.load(directory: directory)
        #expect(list.count == 2 && list.allows(a.publicKey) && list.allows(b.publicKey))
        #expect(list.names[a.publicKey] == "a")
        unlink(directory + "/b.key")
        #expect(Allowlist.signature(of: directory) != before)
        #expect(try !Allowlist.load(directory: directory).allows(b.publicKey))
        #expect(throws: SecurityError.self) { try Allowlist.load(directory: directory + "/missing") }
    }

    @Test("an allowlist fails closed: stray and broken files are skipped with a reason, renamed keys no longer count")
    func allowlistFailsClosed() throws {
        let directory = try self.temporaryDirectory()
        let (alice, bob, carol) = (
            try CurveCertificate.generate(name: "alice"), try CurveCertificate.generate(name: "bob"),
            try CurveCertificate.generate(name: "carol")
        )
        _ = try alice.writePublic(name: "alice", directory: directory)
        _ = try bob.writePublic(name: "bob", directory: directory)
        _ = try carol.writePublic(name: "carol", directory: directory)
        // czmq's name without an extension counts; a renamed key does not.
        try FileManager.default.moveItem(atPath: directory + "/carol.key", toPath: directory + "/carol")
        try FileManager.default.moveItem(atPath: directory + "/bob.key", toPath: directory + "/bob.key.revoked")
        _ = FileManager.default.createFile(atPath: directory + "/notes.txt", contents: Data("bob is CI\n".utf8))
        _ = FileManager.default.createFile(atPath: directory + "/broken.key", contents: Data("junk".utf8))
        let list = try Allowlist.load(directory: directory)
        #expect(list.allows(alice.publicKey) && list.allows(carol.publicKey) && !list.allows(bob.publicKey))
        #expect(list.count == 2)
        #expect(list.skipped.count == 3, "\(list.skipped)")
        #expect(list.skipped.contains { $0.contains("notes.txt: not a certificate name") })
        #expect(list.skipped.contains { $0.contains("bob.key.revoked: not a certificate name") })
        #expect(list.skipped.contains { $0.contains("broken.key") })
    }

    @Test("one key in both allowlists is allowed in neither, and said so")
    func sameKeyTwice() throws {
        let (workers, coordinators) = (try self.temporaryDirectory(), try self.temporaryDirectory())
        let shared = try CurveCertificate.generate(name: "both")
        _ = try shared.writePublic(name: "both", directory: workers)
        _ = try shared.writePublic(name: "both", directory: coordinators)
        let security = BrokerSecurity(
            certificate: try CurveCertificate.generate(name: "broker"),
            workersDirectory: workers,
            coordinatorsDirectory: coordinators
        )
        let policy = try security.loadPolicy()
        #expect(policy.workers.count == 0 && policy.coordinators.count == 0)
        #expect(policy.warnings.contains { $0.contains("in both allowlists, so it is allowed in neither") })
    }

    func request(_ domain: String, key: [UInt8]?, mechanism: String = "CURVE") -> ZAPRequest {
        ZAPRequest(
            version: Array("1.0".utf8),
            requestID: [7],
            domain: domain,
            address: "127.0.0.1",
            mechanism: mechanism,
            credentials: key.map { [$0] } ?? []
        )
    }

    @Test("ZAP: a worker key only on the backend, a coordinator key only on the frontend, nothing else")
    func zapPolicy() throws {
        let worker = try CurveCertificate.generate(name: "w")
        let coordinator = try CurveCertificate.generate(name: "c")
        let stranger = try CurveCertificate.generate(name: "x")
        let policy = ZAPPolicy(
            workers: Allowlist(directory: "w", names: [worker.publicKey: "w"]),
            coordinators: Allowlist(directory: "c", names: [coordinator.publicKey: "c"])
        )
        func bytes(_ certificate: CurveCertificate) -> [UInt8] { Curve.bytes(ofKey: certificate.publicKey)! }
        let allowed = policy.decide(self.request(ZAPPolicy.backendDomain, key: bytes(worker)))
        #expect(allowed.reply.status == "200" && allowed.reply.userID == worker.publicKey && allowed.refusal == nil)
        #expect(allowed.reply.frames.count == 6 && allowed.reply.frames[1] == [7])
        #expect(policy.decide(self.request(ZAPPolicy.frontendDomain, key: bytes(coordinator))).reply.status == "200")
        let cases: [(ZAPRequest, String)] = [
            (self.request(ZAPPolicy.frontendDomain, key: bytes(worker)), "coordinators' allowlist"),
            (self.request(ZAPPolicy.backendDomain, key: bytes(coordinator)), "workers' allowlist"),
            (self.request(ZAPPolicy.backendDomain, key: bytes(stranger)), "workers' allowlist"),
            (self.request(ZAPPolicy.backendDomain, key: nil, mechanism: "NULL"), "not CURVE"),
            (self.request("other", key: bytes(worker)), "unknown ZAP domain"),
            (self.request(ZAPPolicy.backendDomain, key: [1, 2, 3]), "no valid CURVE key"),
        ]
        for (request, reason) in cases {
            let (reply, refusal) = policy.decide(request)
            #expect(reply.status == "400" && reply.userID.isEmpty, "\(reason)")
            #expect(refusal?.reason.contains(reason) == true, "\(String(describing: refusal)) for \(reason)")
        }
        #expect(ZAPRequest.parse([[1], [2], [3]]) == nil)
    }

    @Test("a client reads its monitor: refused key, CURVE on one side only, wrong broker key; each said once")
    func handshakeWatch() {
        func event(_ kind: SocketEvent.Kind, _ value: UInt32 = 0) -> SocketEvent {
            SocketEvent(kind: kind, value: value, endpoint: "tcp://b:5555")
        }
        var worker = HandshakeWatch(endpoint: "tcp://b:5555", role: .worker, curve: true)
        #expect(worker.observe(event(.connected)) == nil)
        let refused = worker.observe(event(.handshakeFailedAuth, 400))
        #expect(refused?.message.contains("refused this key (not in its workers' allowlist") == true)
        #expect(refused?.message.contains("coordinators' port") == true)
        #expect(worker.observe(event(.handshakeFailedAuth, 400)) == nil, "said once")
        var plain = HandshakeWatch(endpoint: "tcp://b:5555", role: .coordinator, curve: false)
        let mismatch = plain.observe(event(.handshakeFailedProtocol, SocketEvent.mechanismMismatch))
        #expect(mismatch?.message.contains("requires CURVE: pass --curve-secret and --broker-key") == true)
        var curved = HandshakeWatch(endpoint: "tcp://b:5555", role: .coordinator, curve: true)
        #expect(
            curved.observe(event(.handshakeFailedProtocol, SocketEvent.mechanismMismatch))?.message.contains(
                "does not use CURVE"
            ) == true
        )
        var wrongKey = HandshakeWatch(endpoint: "tcp://b:5555", role: .coordinator, curve: true)
        #expect(wrongKey.observe(event(.handshakeFailedNoDetail, 32))?.message.contains("wrong --broker-key") == true)
        var plainFailed = HandshakeWatch(endpoint: "tcp://b:5555", role: .coordinator, curve: false)
        #expect(plainFailed.observe(event(.handshakeFailedNoDetail, 32))?.message.contains("requires CURVE") == true)
        // After a handshake that worked, a broken connection is not a key problem: reconnecting mends it.
        var connected = HandshakeWatch(endpoint: "tcp://b:5555", role: .worker, curve: true)
        #expect(connected.observe(event(.handshakeSucceeded)) == nil)
        #expect(connected.observe(event(.handshakeFailedNoDetail, 32)) == nil)
        // Nor on a reconnect to a broker that accepted this key before (it closed during the
        // handshake of a reconnect made on its goodbye: CI saw a worker exit "wrong --broker-key");
        // a refused key or CURVE on one side only is still said.
        var reconnect = HandshakeWatch(endpoint: "tcp://b:5555", role: .worker, curve: true, keyAccepted: true)
        #expect(reconnect.observe(event(.handshakeFailedNoDetail, 32)) == nil)
        #expect(reconnect.observe(event(.handshakeFailedProtocol, 0)) == nil)
        #expect(reconnect.observe(event(.handshakeFailedAuth, 400))?.message.contains("refused this key") == true)
        var reconnectPlain = HandshakeWatch(endpoint: "tcp://b:5555", role: .worker, curve: true, keyAccepted: true)
        #expect(reconnectPlain.observe(event(.handshakeFailedProtocol, SocketEvent.mechanismMismatch)) != nil)
    }
}
