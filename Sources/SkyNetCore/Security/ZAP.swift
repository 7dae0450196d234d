/// A ZAP request (RFC 27) as libzmq sends it to the handler: version, request id, domain, the
/// peer's address, the server socket's routing id, the mechanism and its credentials (for CURVE,
/// the client's 32-byte long-term public key).
package struct ZAPRequest: Equatable {
    package let version: [UInt8]
    package let requestID: [UInt8]
    package let domain: String
    package let address: String
    package let mechanism: String
    package let credentials: [[UInt8]]

    /// Parses the frames a REP socket receives (after the envelope). Nil when they are not a ZAP
    /// request: fewer than 6 frames.
    package static func parse(_ frames: [[UInt8]]) -> ZAPRequest? {
        guard frames.count >= 6 else { return nil }
        return ZAPRequest(
            version: frames[0],
            requestID: frames[1],
            domain: String(decoding: frames[2], as: UTF8.self),
            address: String(decoding: frames[3], as: UTF8.self),
            mechanism: String(decoding: frames[5], as: UTF8.self),
            credentials: Array(frames[6...])
        )
    }
}

/// The ZAP reply: exactly 6 frames, the request id echoed (libzmq checks both).
package struct ZAPReply: Equatable {
    package let requestID: [UInt8]
    /// "200" (allowed) or "400" (refused).
    package let status: String
    package let text: String
    /// The User-Id every message from the peer carries (its public key, Z85), empty when refused.
    package let userID: String

    package init(requestID: [UInt8], status: String, text: String, userID: String) {
        self.requestID = requestID
        self.status = status
        self.text = text
        self.userID = userID
    }

    package var frames: [[UInt8]] {
        [
            Array("1.0".utf8), self.requestID, Array(self.status.utf8), Array(self.text.utf8), Array(self.userID.utf8),
            [],
        ]
    }
}

/// Who may connect to which broker port: a pure decision over a ZAP request. One ZAP domain per
/// port, so a coordinator's key cannot register as a worker and a worker's key cannot submit.
/// Anything but a CURVE request with one allowed key in a known domain is refused.
package struct ZAPPolicy: Sendable {
    /// The frontend's domain (coordinators).
    package static let frontendDomain = "skynet.frontend"
    /// The backend's domain (workers).
    package static let backendDomain = "skynet.backend"

    /// A refused handshake, for the log and the counters.
    package struct Refusal: Equatable {
        package let domain: String
        package let address: String
        /// The first characters of the key (Z85), or "-" without one.
        package let fingerprint: String
        package let reason: String
    }

    package var workers: Allowlist
    package var coordinators: Allowlist
    /// Files skipped and keys left out when the allowlists were read (each logged once a read).
    package var warnings: [String] = []

    package init(workers: Allowlist, coordinators: Allowlist, warnings: [String] = []) {
        self.workers = workers
        self.coordinators = coordinators
        self.warnings = warnings
    }

    /// The reply to `request`, and why it was refused (nil when allowed).
    package func decide(_ request: ZAPRequest) -> (reply: ZAPReply, refusal: Refusal?) {
        let key =
            request.credentials.count == 1
            ? (request.credentials[0].count == 32 ? Z85.encode(request.credentials[0]) : nil) : nil
        func refuse(_ reason: String) -> (ZAPReply, Refusal?) {
            let refusal = Refusal(
                domain: request.domain,
                address: request.address,
                fingerprint: key.map { String($0.prefix(8)) } ?? "-",
                reason: reason
            )
            return (ZAPReply(requestID: request.requestID, status: "400", text: reason, userID: ""), refusal)
        }
        guard request.version == Array("1.0".utf8) else { return refuse("unsupported ZAP version") }
        guard request.mechanism == "CURVE" else { return refuse("not CURVE (\(request.mechanism))") }
        guard let key else { return refuse("no valid CURVE key") }
        switch request.domain {
        case Self.frontendDomain:
            guard self.coordinators.allows(key) else { return refuse("not in its coordinators' allowlist") }
        case Self.backendDomain:
            guard self.workers.allows(key) else { return refuse("not in its workers' allowlist") }
        default:
            return refuse("unknown ZAP domain \(request.domain)")
        }
        return (ZAPReply(requestID: request.requestID, status: "200", text: "OK", userID: key), nil)
    }
}
