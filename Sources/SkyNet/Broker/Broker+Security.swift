import SkyNetCore
import Logging
import ZeroMQ

// CURVE on both ports (DESIGN.md §7). The ZAP handler (RFC 27) is a REP socket on this broker's
// reactor, bound in the broker's context before either ROUTER binds; each ROUTER has its own ZAP
// domain and enforces it, so without a handler every handshake is refused (fail closed). ZAPPolicy
// decides; a peer's key (its User-Id on every message) is its identity from then on.
extension Broker {
    /// libzmq asks for authentication here (RFC 27: one handler per context, at this endpoint).
    static let zapEndpoint = "inproc://zeromq.zap.01"

    /// Reads the allowlists and binds the ZAP handler. Call before the ROUTERs bind.
    func startSecurity(_ security: BrokerSecurity) throws {
        let policy = try security.loadPolicy()
        let zap = try Socket(self.reactor.context, type: .rep)
        do throws(ZMQError) {
            try zap.set(.linger(milliseconds: 0))
            try zap.bind(Self.zapEndpoint)
        } catch {
            zap.close()
            throw error
        }
        self.zap = zap
        self.zapPolicy = policy
        self.allowlistSignatures = (
            Allowlist.signature(of: security.workersDirectory),
            Allowlist.signature(of: security.coordinatorsDirectory)
        )
        self.reactor.register(zap) { self.drainZAP() }
        self.logger.info(
            "CURVE on",
            metadata: [
                "broker.key": "\(security.certificate.publicKey)", "allowed.workers": "\(policy.workers.count)",
                "allowed.coordinators": "\(policy.coordinators.count)",
            ]
        )
        self.warn(policy)
    }

    /// Logs what a read of the allowlists skipped or left out, and an allowlist that is empty.
    private func warn(_ policy: ZAPPolicy) {
        for warning in policy.warnings { self.logger.warning("allowlist: \(warning)") }
        for (list, port) in [(policy.workers, "workers"), (policy.coordinators, "coordinators")] where list.count == 0 {
            self.logger.warning("allowlist \(list.directory) holds no key: no \(port) can connect")
        }
    }

    /// A ROUTER as a CURVE server in `domain`, enforced. Set before it binds: a listener copies its
    /// options when it binds.
    static func secure(_ socket: Socket, _ security: BrokerSecurity, domain: String) throws(ZMQError) {
        guard let secretKey = security.certificate.secretKey else {
            throw ZMQError(code: ZMQError.invalidArgumentCode, operation: "CURVE server without a secret key")
        }
        try socket.set(.curveServer(secretKey: secretKey))
        try socket.set(.zapDomain(domain))
        try socket.set(.zapEnforceDomain(true))
    }

    /// Answers every waiting ZAP request (a REP socket: one reply per request, in order).
    func drainZAP() {
        guard let zap = self.zap, let policy = self.zapPolicy else { return }
        do throws(ZMQError) {
            _ = try zap.receiveBatch(limit: 64) { message in
                let frames = message.allBytes()
                let reply: ZAPReply
                if let request = ZAPRequest.parse(frames) {
                    let (decided, refusal) = policy.decide(request)
                    reply = decided
                    if let refusal { self.refused(refusal) }
                } else {
                    // Not a ZAP request: still exactly one reply, or the REP socket would stall.
                    reply = ZAPReply(
                        requestID: frames.count > 1 ? frames[1] : [],
                        status: "400",
                        text: "malformed",
                        userID: ""
                    )
                }
                _ = try? zap.send(reply.frames)
            }
        } catch {
            self.logger.error("ZAP receive failed", metadata: ["error": "\(error)"])
        }
    }

    private func refused(_ refusal: ZAPPolicy.Refusal) {
        self.refusedHandshakes += 1
        self.securityLog.log(
            self.logger,
            level: .warning,
            "handshake refused",
            metadata: [
                "port": "\(refusal.domain == ZAPPolicy.frontendDomain ? "frontend" : "backend")",
                "peer.address": "\(refusal.address)", "key": "\(refusal.fingerprint)", "reason": "\(refusal.reason)",
            ]
        )
    }

    /// Whether a message from `peer` may be handled: it came to the right port, and with CURVE, it
    /// carries the key its routing id first spoke with, and that key is still allowed. A refused
    /// message is dropped (a peer on the wrong port, or whose key was removed, is told why).
    @inline(__always)
    func admit(_ message: borrowing Multipart, from peer: PeerID, front: Bool) -> Bool {
        let first = peer.first
        let wrongPort = front ? first == UInt8(ascii: "w") : (first == UInt8(ascii: "c") || first == UInt8(ascii: "j"))
        if self.zapPolicy == nil && !wrongPort { return true }
        return self.admitChecked(message, from: peer, front: front, wrongPort: wrongPort)
    }

    private func admitChecked(_ message: borrowing Multipart, from peer: PeerID, front: Bool, wrongPort: Bool) -> Bool {
        if wrongPort {
            let text =
                front
                ? "\(self.endpoints?.frontend ?? "this") is the broker's coordinators' port; workers connect to its backend, \(self.portHint(self.endpoints?.backend, default: ":5556"))"
                : "\(self.endpoints?.backend ?? "this") is the broker's workers' port; coordinators connect to its frontend, \(self.portHint(self.endpoints?.frontend, default: ":5555"))"
            self.tell(peer, front: front, .disconnect(.wrongPort, text: text))
            return false
        }
        guard let policy = self.zapPolicy else { return true }
        guard let key = message.property("User-Id", of: 1), !key.isEmpty else {
            // With the domain enforced every connection went through ZAP; this cannot happen.
            self.refusedHandshakes += 1
            return false
        }
        if let known = self.peerKeys[peer] {
            guard known == key else {
                self.refusedHandshakes += 1
                self.securityLog.log(
                    self.logger,
                    level: .warning,
                    "message refused: the routing id is another key's",
                    metadata: ["peer": "\(peer)", "key": "\(key.prefix(8))", "owner.key": "\(known.prefix(8))"]
                )
                return false
            }
        } else {
            self.peerKeys[peer] = key
            if !front,
                let other = self.peerKeys.first(where: {
                    $0.key != peer && $0.value == key && self.machine.state.workers[$0.key] != nil
                })
            {
                // One key, two live workers: a copied secret (or one host started twice). Both are
                // served, since the key is allowed; `skynet status` and the dashboard flag them.
                self.logger.warning(
                    "a second worker connected with the key of a live worker: was its secret copied? (replace the key and remove the old one from --allow-workers)",
                    metadata: [
                        "key": "\(key.prefix(8))", "worker": "\(self.machine.state.workers[other.key]?.name ?? "?")",
                        "peer": "\(peer)",
                    ]
                )
            }
        }
        guard front ? policy.coordinators.allows(key) : policy.workers.allows(key) else {
            self.refusedHandshakes += 1
            self.revoke(peer, front: front, key: key)
            return false
        }
        return true
    }

    /// `:5556` from `tcp://0.0.0.0:5556`.
    private func portHint(_ endpoint: String?, default fallback: String) -> String {
        guard let endpoint, let colon = endpoint.lastIndex(of: ":") else { return "\(fallback) by default" }
        return "\(endpoint[colon...]) here (\(fallback) by default)"
    }

    private func tell(_ peer: PeerID, front: Bool, _ message: WireMessage) {
        if front { self.sendToCoordinator(peer, message) } else { self.sendToWorker(peer, message) }
    }

    /// A connected peer whose key is no longer allowed: it is told, and its work goes (a worker's
    /// leases are requeued; a coordinator's tasks are dropped, as when it goes away).
    private func revoke(_ peer: PeerID, front: Bool, key: String) {
        self.securityLog.log(
            self.logger,
            level: .warning,
            "message refused: key removed from the allowlist",
            metadata: ["peer": "\(peer)", "key": "\(key.prefix(8))", "port": "\(front ? "frontend" : "backend")"]
        )
        let text = "this key was removed from the broker's \(front ? "coordinators'" : "workers'") allowlist"
        if front {
            self.sendToCoordinator(peer, .disconnect(.revoked, text: text))
            self.machine.coordinatorLost(peer, now: .now)
        } else {
            self.sendToWorker(peer, .disconnect(.revoked, text: text))
            self.machine.workerLost(peer, reason: "key revoked", now: .now)
        }
        self.performEffects()
    }

    /// Reads both allowlists again (SIGHUP, or their directories changed). A removed key is refused
    /// at its next handshake, and a connected peer holding it has its messages refused from now on.
    /// Files that are not certificates, or cannot be read, are skipped with a warning; only a
    /// directory that cannot be read keeps the lists in force. The files are read off the reactor.
    public func reloadAllowlists() { self.readAllowlists(force: true) }

    /// Every heartbeat: reload changed allowlists, and forget the keys of peers that are gone.
    func checkSecurity() {
        guard self.zapPolicy != nil else { return }
        self.readAllowlists(force: false)
        if self.peerKeys.count > self.machine.state.workers.count + self.machine.state.coordinators.count {
            self.peerKeys = self.peerKeys.filter {
                self.machine.state.workers[$0.key] != nil || self.machine.state.coordinators[$0.key] != nil
            }
        }
    }

    /// Lists the allowlist directories and, when they changed (or `force`), reads them, on the global
    /// pool: listing, stat-ing and parsing files is disk I/O, which the reactor never waits for.
    private func readAllowlists(force: Bool) {
        guard let security = self.configuration.security, self.zapPolicy != nil else { return }
        guard !self.readingAllowlists else {
            // One read at a time; a SIGHUP meanwhile reads once more after it.
            if force { self.rereadAllowlists = true }
            return
        }
        self.readingAllowlists = true
        let known = self.allowlistSignatures
        Task.detached { [weak self] in
            let signatures = (
                Allowlist.signature(of: security.workersDirectory),
                Allowlist.signature(of: security.coordinatorsDirectory)
            )
            let reading: Result<ZAPPolicy, SecurityError>? =
                !force && signatures == known
                ? nil : Result { () throws(SecurityError) in try security.loadPolicy() }
            await self?.allowlistsRead(reading, signatures: signatures)
        }
    }

    private func allowlistsRead(_ reading: Result<ZAPPolicy, SecurityError>?, signatures: (String, String)) {
        self.readingAllowlists = false
        guard self.zapPolicy != nil, let reading else { return }
        // A failed read is not retried until the directories change again (or SIGHUP): one error.
        self.allowlistSignatures = signatures
        switch reading {
        case .success(let policy):
            self.zapPolicy = policy
            self.logger.info(
                "allowlists reloaded",
                metadata: [
                    "allowed.workers": "\(policy.workers.count)",
                    "allowed.coordinators": "\(policy.coordinators.count)",
                ]
            )
            self.warn(policy)
        case .failure(let error):
            self.logger.error(
                "allowlists not reloaded; the previous ones stay in force",
                metadata: ["error": "\(error)"]
            )
        }
        if self.rereadAllowlists {
            self.rereadAllowlists = false
            self.readAllowlists(force: true)
        }
    }

    /// Closes the ZAP handler (after the ROUTERs: their handshakes then fail closed).
    func stopSecurity() {
        guard let zap = self.zap else { return }
        self.reactor.unregister(zap)
        zap.close()
        self.zap = nil
    }
}
