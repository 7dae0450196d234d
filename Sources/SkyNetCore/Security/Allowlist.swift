/// The public keys allowed on one broker port: every certificate (`*.key`, or czmq's name without
/// an extension) in a directory. Re-read when the directory changes (``signature(of:)``) or on
/// SIGHUP.
///
/// It fails closed: a file that is not a certificate by name (`notes.txt`, `alice.key.revoked`,
/// `*.bak`) is skipped with a warning, and so is a certificate that cannot be read, so one stray
/// or broken file never keeps a removed key in force. Secret files (`*_secret`) and dotfiles are
/// skipped in silence. To revoke a key, delete its `.key` file or rename it to anything that does
/// not end in `.key` (`alice.key.revoked`).
public struct Allowlist: Sendable, Equatable {
    /// The directory it was read from.
    public let directory: String
    /// Allowed public keys (Z85) and the name each certificate gives (its `metadata` `name`, else
    /// its file name).
    public package(set) var names: [String: String]
    /// What was skipped and why, one line a file (`notes.txt: not a certificate name …`).
    public package(set) var skipped: [String]

    /// An allowlist of the given keys (for tests and embedded use).
    public init(directory: String, names: [String: String], skipped: [String] = []) {
        self.directory = directory
        self.names = names
        self.skipped = skipped
    }

    /// Whether `publicKey` (Z85) is allowed.
    public func allows(_ publicKey: String) -> Bool { self.names[publicKey] != nil }

    /// How many keys.
    public var count: Int { self.names.count }
}
