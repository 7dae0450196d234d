import SkyNetCore
import Glibc

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

    /// Reads both allowlists. A key in both is left out of both (one key would otherwise be both a
    /// worker and a coordinator), and said so in ``ZAPPolicy/warnings``, with every file skipped.
    /// - Throws: ``SecurityError`` when a directory cannot be read.
    func loadPolicy() throws(SecurityError) -> ZAPPolicy {
        var workers = try Allowlist.load(directory: self.workersDirectory)
        var coordinators = try Allowlist.load(directory: self.coordinatorsDirectory)
        var warnings = workers.skipped + coordinators.skipped
        for shared in workers.names.keys.sorted() where coordinators.allows(shared) {
            warnings.append(
                "the key of \(workers.names[shared] ?? "?") (\(shared.prefix(8))…) is in both allowlists, so it is allowed in neither; give workers and coordinators their own keys"
            )
            workers.remove(shared)
            coordinators.remove(shared)
        }
        return ZAPPolicy(workers: workers, coordinators: coordinators, warnings: warnings)
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

/// Fresh CURVE keys for a broker, its workers and a coordinator, with the two allowlists, in a new
/// temporary directory (mode 0700): CURVE in one command (`skynet demo --curve`, `skynet bench
/// --curve`, tests). Not for deployment: there each host makes its own keys (`skynet keygen`).
public struct EphemeralKeys: Sendable {
    /// The broker's setup (its key, `allow/workers`, `allow/coordinators`).
    public let broker: BrokerSecurity
    /// A worker's keys (allowed on the backend).
    public let worker: ClientSecurity
    /// A coordinator's keys (allowed on the frontend).
    public let coordinator: ClientSecurity
    /// Where the files are.
    public let directory: String

    /// Makes the keys and writes them under a new temporary directory.
    /// - Throws: ``SecurityError`` when the directory or a file cannot be made.
    public static func make() throws(SecurityError) -> EphemeralKeys {
        var template = Array("/tmp/skynet-keys-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SecurityError(
                .configuration,
                "cannot make a temporary key directory: \(String(cString: strerror(errno)))"
            )
        }
        let directory = String(cString: made)
        for sub in ["allow", "allow/workers", "allow/coordinators"] {
            guard mkdir(directory + "/" + sub, 0o700) == 0 else {
                throw SecurityError(
                    .configuration,
                    "cannot make \(directory)/\(sub): \(String(cString: strerror(errno)))"
                )
            }
        }
        var certificates: [String: CurveCertificate] = [:]
        for name in ["broker", "worker", "coordinator"] {
            let certificate = try CurveCertificate.generate(name: name)
            _ = try certificate.write(name: name, directory: directory, force: false)
            certificates[name] = certificate
        }
        let (broker, worker, coordinator) = (
            certificates["broker"]!, certificates["worker"]!, certificates["coordinator"]!
        )
        _ = try worker.writePublic(name: "worker", directory: directory + "/allow/workers")
        _ = try coordinator.writePublic(name: "coordinator", directory: directory + "/allow/coordinators")
        return EphemeralKeys(
            broker: BrokerSecurity(
                certificate: broker,
                workersDirectory: directory + "/allow/workers",
                coordinatorsDirectory: directory + "/allow/coordinators"
            ),
            worker: ClientSecurity(brokerKey: broker.publicKey, certificate: worker),
            coordinator: ClientSecurity(brokerKey: broker.publicKey, certificate: coordinator),
            directory: directory
        )
    }

    /// Removes the directory and every key in it.
    public func remove() {
        for path in [
            "allow/workers/worker.key", "allow/coordinators/coordinator.key", "broker.key", "broker.key_secret",
            "worker.key", "worker.key_secret", "coordinator.key", "coordinator.key_secret",
        ] {
            unlink(self.directory + "/" + path)
        }
        for sub in ["allow/workers", "allow/coordinators", "allow", ""] { rmdir(self.directory + "/" + sub) }
    }
}
