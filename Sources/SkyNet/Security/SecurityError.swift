import SkyNetCore
/// A key, certificate or allowlist problem: a file that is missing, unreadable, malformed or too
/// open, or a configuration that would not be safe. The message says what to do.
public struct SecurityError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong; more codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// A key file cannot be read or parsed, or holds no valid key.
        public static let badKeyFile = Code(name: "bad key file")
        /// A secret key file is readable or writable by group or others.
        public static let permissions = Code(name: "permissions")
        /// A file would be overwritten (`skynet keygen` without `--force`).
        public static let exists = Code(name: "exists")
        /// An allowlist directory cannot be read, or the configuration is unsafe (the same key in
        /// both allowlists, a published test key).
        public static let configuration = Code(name: "configuration")
        /// The peer refused this side's key, or the handshake failed.
        public static let refused = Code(name: "refused")
        public var description: String { self.name }
    }

    /// What went wrong.
    public let code: Code
    /// What happened and what to do, in one line.
    public let message: String

    /// An error with a code and a message.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { self.message }
}
