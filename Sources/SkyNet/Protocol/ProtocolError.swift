/// Why a frame or message from the network was rejected.
///
/// Every malformed input maps to one of these; decoding never traps. The broker drops such messages,
/// counts them by ``Code`` and logs them rate-limited.
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An extensible set of reasons.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        public var description: String { self.name }
        public static let badMagic = Code(name: "bad magic")
        public static let badVersion = Code(name: "unsupported version")
        public static let unknownCommand = Code(name: "unknown command")
        public static let badHeaderLength = Code(name: "bad header length")
        public static let reservedNotZero = Code(name: "reserved bits set")
        public static let badFrameCount = Code(name: "bad frame count")
        public static let badLength = Code(name: "bad length")
        public static let invalidUTF8 = Code(name: "invalid UTF-8")
        public static let invalidValue = Code(name: "invalid value")
        public static let badTaskID = Code(name: "bad task id")
        public static let wrongDirection = Code(name: "unexpected command")
        public static let oversized = Code(name: "message too large")
    }

    public let code: Code
    /// Detail for logs, e.g. "READY has 1 frame, expected 2".
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(self.code): \(self.detail)" }
}
