import ArgumentParser
import Foundation
import SkyNet

struct KeygenCommand: ParsableCommand, CheckedArguments {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Make a CURVE key pair: DIR/NAME.key (public) and DIR/NAME.key_secret (secret, mode 0600).",
        discussion: """
            The files are czmq/pyzmq certificates. Give the secret file to the process it names (the \
            broker: --curve-secret; a worker or coordinator: --curve-secret) and nobody else. Give the \
            public file to the other side: the broker's broker.key to every client (--broker-key), a \
            worker's to the broker's --allow-workers directory, a coordinator's to --allow-coordinators. \
            Prints the public key.
            """
    )

    @Argument(help: "The key's name: the file names and the certificate's metadata (e.g. broker, worker-eu-7).")
    var name: String

    @Option(help: "The directory to write the two files to (created if missing, mode 0700).")
    var dir = "."

    @Flag(help: "Replace existing files of that name.")
    var force = false

    func check() throws {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        guard !self.name.isEmpty, self.name.count <= 64, self.name.allSatisfy({ allowed.contains($0) }),
            !self.name.hasPrefix(".")
        else {
            throw ValidationError("the name must be 1 to 64 letters, digits, '-', '_' or '.' (not starting with '.')")
        }
    }

    func run() throws {
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: self.dir, isDirectory: &isDirectory) {
            do {
                try FileManager.default.createDirectory(
                    atPath: self.dir,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700]
                )
            } catch {
                throw CLIError("cannot create \(self.dir): \(error.localizedDescription)")
            }
        } else if !isDirectory.boolValue {
            throw CLIError("\(self.dir) is not a directory")
        }
        var certificate = try CurveCertificate.generate(name: self.name)
        certificate.metadata["created"] = ISO8601DateFormatter().string(from: Date())
        let (publicPath, secretPath) = try certificate.write(name: self.name, directory: self.dir, force: self.force)
        print(certificate.publicKey)
        FileHandle.standardError.write(Data("wrote \(publicPath) (public) and \(secretPath) (secret, 0600)\n".utf8))
    }
}
