import CZMQ

/// An error reported by libzmq, carried as a value with the errno text.
///
/// The `code` is the errno value libzmq reported (`zmq_errno()`); `operation` names the call that
/// failed so a message such as `bind tcp://*:5555: Address already in use` says what to fix.
public struct ZMQError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The errno value (`EAGAIN`, `EHOSTUNREACH`, `EADDRINUSE`, ...).
    public let code: Int32
    /// What was being done, for example `bind tcp://*:5555`.
    public let operation: String

    /// An error for `code` (an errno value) from `operation`.
    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// The error of the last libzmq call on this thread.
    static func last(_ operation: @autoclosure () -> String) -> ZMQError {
        ZMQError(code: zmq_errno(), operation: operation())
    }

    /// libzmq's text for the errno, e.g. "Address already in use".
    public var message: String { String(cString: zmq_strerror(self.code)) }

    /// The send would block (peer at its high-water mark, or not connected with `IMMEDIATE`).
    public var isWouldBlock: Bool { self.code == EAGAIN }
    /// A ROUTER with `ROUTER_MANDATORY` has no peer with that routing id (peer gone).
    public var isHostUnreachable: Bool { self.code == EHOSTUNREACH }
    /// errno for "the context was terminated", for errors SkyNet makes up about its own lifecycle.
    public static let terminatedCode: Int32 = ETERM
    /// errno for "invalid argument", for errors SkyNet makes up about a configuration.
    public static let invalidArgumentCode: Int32 = EINVAL

    /// The call was interrupted by a signal.
    public var isInterrupted: Bool { self.code == EINTR }

    /// The operation and what went wrong.
    public var description: String { "\(self.operation): \(self.message)" }
}
