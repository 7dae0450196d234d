/// A broker's CURVE setup: its secret key, and the directories of certificates allowed on each port.
/// With it, both ports encrypt every frame and authenticate every peer in the handshake, and a
/// peer's key (its ZAP User-Id) is its identity (DESIGN.md §7).
public struct BrokerSecurity: Sendable, Equatable {
    /// The broker's key pair (its public key is what clients pin with `--broker-key`).
    public var certificate: CurveCertificate
    /// Certificates allowed on the backend (workers).
    public var workersDirectory: String
    /// Certificates allowed on the frontend (coordinators, `skynet submit`, `status`, `results`).
    public var coordinatorsDirectory: String

    /// A setup from a secret certificate (with its secret key) and two allowlist directories.
    public init(certificate: CurveCertificate, workersDirectory: String, coordinatorsDirectory: String) {
        self.certificate = certificate
        self.workersDirectory = workersDirectory
        self.coordinatorsDirectory = coordinatorsDirectory
    }

    /// Reads the broker's secret certificate and checks both allowlists can be read.
    /// - Throws: ``SecurityError`` naming the file or directory that is wrong.
    public static func load(
        secretPath: String,
        workersDirectory: String,
        coordinatorsDirectory: String
    ) throws(SecurityError) -> BrokerSecurity {
        let security = BrokerSecurity(
            certificate: try CurveCertificate.loadSecret(path: secretPath),
            workersDirectory: workersDirectory,
            coordinatorsDirectory: coordinatorsDirectory
        )
        _ = try security.loadPolicy()
        return security
    }

    /// Reads both allowlists.
    /// - Throws: ``SecurityError`` when one cannot be read, or a key is in both (one key would then
    ///   be both a worker and a coordinator).
    func loadPolicy() throws(SecurityError) -> ZAPPolicy {
        let workers = try Allowlist.load(directory: self.workersDirectory)
        let coordinators = try Allowlist.load(directory: self.coordinatorsDirectory)
        if let shared = workers.names.keys.first(where: { coordinators.allows($0) }) {
            throw SecurityError(
                .configuration,
                "the key of \(workers.names[shared] ?? "?") (\(shared.prefix(8))…) is in both allowlists; give workers and coordinators their own keys"
            )
        }
        return ZAPPolicy(workers: workers, coordinators: coordinators)
    }
}

/// A worker's or coordinator's CURVE setup: its own key pair and the broker's public key, pinned
/// (a broker without the matching secret key cannot complete the handshake).
public struct ClientSecurity: Sendable, Equatable {
    /// The broker's public key (Z85).
    public var brokerKey: String
    /// This client's key pair.
    public var certificate: CurveCertificate

    /// A setup from this client's secret certificate and the broker's public key.
    public init(brokerKey: String, certificate: CurveCertificate) {
        self.brokerKey = brokerKey
        self.certificate = certificate
    }

    /// Reads this client's secret certificate and the broker's public certificate.
    /// - Throws: ``SecurityError`` naming the file that is wrong.
    public static func load(secretPath: String, brokerKeyPath: String) throws(SecurityError) -> ClientSecurity {
        ClientSecurity(
            brokerKey: try CurveCertificate.loadPublic(path: brokerKeyPath).publicKey,
            certificate: try CurveCertificate.loadSecret(path: secretPath)
        )
    }
}
