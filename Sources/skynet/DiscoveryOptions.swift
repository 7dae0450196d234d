import ArgumentParser
import Foundation
import Logging
import SkyNet

/// `--discover`, `--discover-port` and `--discover-wait`, for the commands that connect to a broker:
/// the broker comes from its beacon on the LAN (`skynet broker --announce`) instead of `--broker`.
struct DiscoveryOptions: ParsableArguments, CheckedArguments {
    @Flag(
        help: ArgumentHelp(
            "Find the broker on the local network from its beacon (`skynet broker --announce`), instead of --broker.",
            discussion: """
                With CURVE, only a broker whose key is --broker-key's (a file, or a directory of them) is \
                followed: an announced key is never trusted on its own. Without CURVE only a broker on \
                this host is, unless --insecure.
                """
        )
    )
    var discover = false

    @Option(help: "The UDP port beacons come to.")
    var discoverPort: Int = Int(Beacon.defaultPort)

    @Option(help: "With --discover, how long to wait for a broker's beacon before giving up (a duration: 5s).")
    var discoverWait = DurationArgument(.seconds(5))

    func check() throws {
        guard (1...65535).contains(self.discoverPort) else {
            throw ValidationError("--discover-port must be 1 to 65535")
        }
        // Beacons come once a second: a shorter wait could never hear one.
        guard self.discoverWait.duration >= .seconds(1), self.discoverWait.duration <= .seconds(3600) else {
            throw ValidationError("--discover-wait must be from 1s (beacons come once a second) to 1h")
        }
        // --broker has a default, so whether it was given is read from the command line itself;
        // SKYNET_BROKER (an environment file's) gives way to --discover.
        if self.discover,
            CommandLine.arguments.dropFirst().contains(where: { $0 == "--broker" || $0.hasPrefix("--broker=") })
        {
            throw ValidationError("--discover finds the broker by its beacon: leave out --broker (or --discover)")
        }
    }

    /// The pinned keys a discovered broker must have (nil: plain text), from `--broker-key`: a
    /// certificate file, or a directory of them (only with --discover).
    static func pinnedKeys(_ curve: CurveOptions) throws -> Set<String>? {
        guard let path = curve.brokerKeyPath else { return nil }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            return try curve.load().map { Set([$0.brokerKey]) }
        }
        do {
            let keys = Set(try Allowlist.load(directory: path).names.keys)
            guard !keys.isEmpty else {
                throw CLIError("--broker-key \(path): the directory holds no broker certificate (NAME.key)")
            }
            return keys
        } catch let error as SecurityError {
            throw CLIError("\(error)")
        }
    }

    /// Starts listening (with --discover) and waits for the first broker to follow.
    /// - Returns: the listener (to keep following) and the endpoints and security to use.
    func find(
        curve: CurveOptions,
        insecure: Bool,
        workers: Bool,
        waitForever: Bool = false,
        logger: Logger
    ) async throws -> (listener: BeaconListener, endpoints: String, security: ClientSecurity?) {
        let keys = try Self.pinnedKeys(curve)
        let listener: BeaconListener
        do {
            listener = try BeaconListener(
                port: UInt16(self.discoverPort),
                trust: BeaconTrust(keys: keys, insecure: insecure),
                logger: logger
            )
        } catch {
            throw CLIError("\(error)")
        }
        var deadline = ContinuousClock.now + self.discoverWait.duration
        while true {
            if let found = HeardBroker.follow(listener.brokers(), workers: workers) {
                return (listener, found.endpoints, try Self.security(curve, brokerKey: found.key))
            }
            if ContinuousClock.now >= deadline {
                let problem =
                    "no broker heard on UDP port \(self.discoverPort) within \(self.discoverWait.duration)\(keys == nil ? "" : " with --broker-key's key"): is `skynet broker --announce` running on this network? (or give --broker)"
                guard waitForever else {
                    listener.stop()
                    throw CLIError(problem)
                }
                // A worker waits as long as it takes, and says so every 30 s.
                logger.warning("\(problem); still listening")
                deadline = ContinuousClock.now + .seconds(30)
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A coordinator's broker (frontends) and keys: from --broker and the CURVE flags, or with
    /// --discover from the first broker heard that may be followed.
    func connection(
        _ broker: String,
        _ curve: CurveOptions,
        _ insecure: Bool,
        _ logger: Logger
    ) async throws -> (broker: String, security: ClientSecurity?) {
        guard self.discover else { return (broker, try curve.load()) }
        let found = try await self.find(curve: curve, insecure: insecure, workers: false, logger: logger)
        found.listener.stop()
        logger.info("following the broker at \(found.endpoints)")
        return (found.endpoints, found.security)
    }

    /// This side's keys with the followed broker's key.
    static func security(_ curve: CurveOptions, brokerKey: String?) throws -> ClientSecurity? {
        guard let brokerKey, let secret = curve.curveSecretPath else { return nil }
        do {
            return ClientSecurity(brokerKey: brokerKey, certificate: try CurveCertificate.loadSecret(path: secret))
        } catch {
            throw CLIError("\(error)")
        }
    }
}
