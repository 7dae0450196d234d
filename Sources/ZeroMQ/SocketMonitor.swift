import CZMQ

/// One event from a socket's monitor (`zmq_socket_monitor`): connections, and above all handshake
/// failures, which libzmq reports nowhere else (a send or receive never says a CURVE handshake
/// failed).
public struct SocketEvent: Sendable, Equatable {
    /// What happened (`ZMQ_EVENT_*`).
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        /// The `ZMQ_EVENT_*` value.
        public let raw: UInt16
        /// A TCP connection was made (client side).
        public static let connected = Kind(raw: UInt16(ZMQ_EVENT_CONNECTED))
        /// A connection was accepted (server side).
        public static let accepted = Kind(raw: UInt16(ZMQ_EVENT_ACCEPTED))
        /// A connection was closed.
        public static let disconnected = Kind(raw: UInt16(ZMQ_EVENT_DISCONNECTED))
        /// The security handshake succeeded.
        public static let handshakeSucceeded = Kind(raw: UInt16(ZMQ_EVENT_HANDSHAKE_SUCCEEDED))
        /// The handshake failed without a protocol error (value: an errno; a wrong server key shows
        /// here on the client, as EPIPE).
        public static let handshakeFailedNoDetail = Kind(raw: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
        /// The handshake broke the protocol (value: a `ZMQ_PROTOCOL_ERROR_*`, e.g. a mechanism mismatch
        /// between a CURVE and a plain-text peer).
        public static let handshakeFailedProtocol = Kind(raw: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL))
        /// Authentication refused the peer (value: the ZAP status code, e.g. 400).
        public static let handshakeFailedAuth = Kind(raw: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))
        /// A listener could not accept a connection (value: the errno, e.g. `EMFILE`).
        public static let acceptFailed = Kind(raw: UInt16(ZMQ_EVENT_ACCEPT_FAILED))

        public var description: String {
            switch self {
            case .connected: "connected"
            case .accepted: "accepted"
            case .disconnected: "disconnected"
            case .handshakeSucceeded: "handshake succeeded"
            case .handshakeFailedNoDetail: "handshake failed"
            case .handshakeFailedProtocol: "handshake failed (protocol)"
            case .handshakeFailedAuth: "handshake refused"
            case .acceptFailed: "accept failed"
            default: "event \(self.raw)"
            }
        }
    }

    /// `ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH`: one side uses CURVE and the other does not.
    public static let mechanismMismatch: UInt32 = UInt32(ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    /// `ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC`: a CURVE box did not open (the server's view of a
    /// client with the wrong server key).
    public static let cryptographic: UInt32 = UInt32(ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)

    /// What happened.
    public let kind: Kind
    /// The event's value: an errno, a protocol error or a ZAP status, by kind.
    public let value: UInt32
    /// The endpoint it happened on (the peer's address for accepted connections).
    public let endpoint: String

    /// An event.
    public init(kind: Kind, value: UInt32, endpoint: String) {
        self.kind = kind
        self.value = value
        self.endpoint = endpoint
    }

    /// Decodes a monitor message: a 6-byte frame (u16 event, u32 value, native byte order) and the
    /// endpoint. Nil for anything else.
    public static func decode(_ message: borrowing Multipart) -> SocketEvent? {
        guard message.count == 2, message.size(of: 0) == 6 else { return nil }
        let (kind, value) = message.withBytes(of: 0) { bytes in
            (bytes.loadUnaligned(as: UInt16.self), bytes.loadUnaligned(fromByteOffset: 2, as: UInt32.self))
        }
        let endpoint = message.withBytes(of: 1) { String(decoding: $0, as: UTF8.self) }
        return SocketEvent(kind: Kind(raw: kind), value: value, endpoint: endpoint)
    }
}

extension Socket {
    /// Starts monitoring this socket's handshakes and connections, and returns the PAIR socket its
    /// events arrive on (one message per event: decode with ``SocketEvent/decode(_:)``). Register it
    /// on the reactor that owns this socket; close it before this socket.
    /// - Parameters:
    ///   - name: unique within the context (the monitor's inproc endpoint).
    ///   - kinds: the events to report (default: connections and handshakes).
    public func monitor(name: String, kinds: [SocketEvent.Kind]? = nil) throws(ZMQError) -> Socket {
        let endpoint = "inproc://skynet.monitor.\(name)"
        let events =
            kinds.map { $0.reduce(Int32(0)) { $0 | Int32($1.raw) } }
            ?? (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED
                | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        if zmq_socket_monitor(self.rawHandle, endpoint, events) != 0 { throw ZMQError.last("monitor") }
        let pair = try Socket(self.context, type: .pair)
        do throws(ZMQError) {
            try pair.set(.linger(milliseconds: 0))
            try pair.connect(endpoint)
        } catch {
            pair.close()
            throw error
        }
        return pair
    }

    /// Stops monitoring (before closing the socket or its monitor).
    public func stopMonitoring() {
        guard !self.isClosed else { return }
        zmq_socket_monitor(self.rawHandle, nil, 0)
    }
}

extension Multipart {
    /// A metadata property of frame `index` (`zmq_msg_gets`): `"User-Id"` (what a ZAP handler said
    /// the peer is), `"Peer-Address"`, or a property the handler returned. Nil when absent.
    public func property(_ name: String, of index: Int = 0) -> String? {
        precondition(index >= 0 && index < self.count, "frame index out of range")
        guard let value = zmq_msg_gets(self.frameMessage(index), name) else { return nil }
        return String(cString: value)
    }
}
