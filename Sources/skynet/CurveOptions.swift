import ArgumentParser
import Foundation
import SkyNet

/// `--curve-secret` and `--broker-key` for the commands that connect to a broker (also from
/// `SKYNET_CURVE_SECRET` and `SKYNET_BROKER_KEY`, for compose files and container secrets).
struct CurveOptions: ParsableArguments, CheckedArguments {
    @Option(
        help: ArgumentHelp(
            "This client's secret certificate (NAME.key_secret from `skynet keygen`): CURVE on.",
            discussion: "Also from SKYNET_CURVE_SECRET. Goes with --broker-key.",
            valueName: "file"
        )
    )
    var curveSecret: String?

    @Option(
        help: ArgumentHelp(
            "The broker's public certificate (broker.key), pinned: only that broker completes the handshake.",
            discussion: "Also from SKYNET_BROKER_KEY. Goes with --curve-secret.",
            valueName: "file"
        )
    )
    var brokerKey: String?

    /// The paths given by flag or, failing that, by environment.
    private var paths: (secret: String?, brokerKey: String?) {
        let environment = ProcessInfo.processInfo.environment
        return (
            self.curveSecret ?? environment["SKYNET_CURVE_SECRET"].flatMap { $0.isEmpty ? nil : $0 },
            self.brokerKey ?? environment["SKYNET_BROKER_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        )
    }

    func check() throws {
        switch self.paths {
        case (nil, nil), (.some, .some): break
        case (.some, nil): throw ValidationError("--curve-secret needs --broker-key (the broker's public certificate)")
        case (nil, .some): throw ValidationError("--broker-key needs --curve-secret (this client's secret certificate)")
        }
    }

    var curveSecretPath: String? { self.paths.secret }
    var brokerKeyPath: String? { self.paths.brokerKey }

    /// The keys, read and checked (nil: plain text).
    /// - Throws: ``CLIError`` with the file's problem (missing, malformed, readable by others).
    func load() throws -> ClientSecurity? {
        guard case (let secret?, let brokerKey?) = self.paths else { return nil }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: brokerKey, isDirectory: &isDirectory), isDirectory.boolValue {
            throw CLIError(
                "--broker-key \(brokerKey) is a directory: a directory of broker keys is for --discover; without it give the broker's certificate file"
            )
        }
        do {
            return try ClientSecurity.load(secretPath: secret, brokerKeyPath: brokerKey)
        } catch {
            throw CLIError("\(error)")
        }
    }
}
