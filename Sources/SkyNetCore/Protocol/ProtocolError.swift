/// Why a frame or message from the network was rejected.
///
/// Every malformed input maps to one of these; decoding never traps. The broker drops such messages,
/// counts them by ``Code`` and logs them rate-limited.
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An extensible set of reasons.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        package let name: String
        /// The code's name.
        public var description: String { self.name }
        /// The header does not start with SkyNet's magic bytes.
        public static let badMagic = Code(name: "bad magic")
        /// A protocol version this build does not speak.
        public static let badVersion = Code(name: "unsupported version")
        /// A command byte this build does not know.
        public static let unknownCommand = Code(name: "unknown command")
        /// A header frame that is not 32 bytes.
        public static let badHeaderLength = Code(name: "bad header length")
        /// Reserved bits or bytes that are not zero.
        public static let reservedNotZero = Code(name: "reserved bits set")
        /// Too few or too many frames for the command.
        public static let badFrameCount = Code(name: "bad frame count")
        /// A length that does not match the bytes there.
        public static let badLength = Code(name: "bad length")
        /// Text that is not UTF-8.
        public static let invalidUTF8 = Code(name: "invalid UTF-8")
        /// A value out of its range.
        public static let invalidValue = Code(name: "invalid value")
        /// A task id that is not a version-4 UUID.
        public static let badTaskID = Code(name: "bad task id")
        /// A command the receiving side never accepts (a worker sending SUBMIT).
        public static let wrongDirection = Code(name: "unexpected command")
    }

    /// What was wrong.
    public let code: Code
    /// Detail for logs, e.g. "READY has 1 frame, expected 2".
    public let detail: String

    /// An error with a code and a detail.
    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// The code and the detail.
    public var description: String { "\(self.code): \(self.detail)" }
}
