import CZMQ
import Glibc

/// A socket option with a value of the right C type, so an `int64_t` option can never be set as an `int`.
///
/// Options other than security take effect for later `bind`/`connect` calls: set them first.
public enum SocketOption: Sendable, Equatable {
    /// `ZMQ_ROUTING_ID`: the identity a DEALER presents to a ROUTER (set before connecting).
    case routingID([UInt8])
    /// `ZMQ_LINGER` in milliseconds (-1 waits forever on close; 0 drops unsent messages).
    case linger(milliseconds: Int32)
    /// `ZMQ_ROUTER_MANDATORY`: a send to an unknown peer fails with `EHOSTUNREACH` instead of vanishing.
    case routerMandatory(Bool)
    /// `ZMQ_ROUTER_HANDOVER`: a reconnecting peer with a known routing id takes over the old connection.
    case routerHandover(Bool)
    /// `ZMQ_IMMEDIATE`: queue messages only on completed connections (send returns `EAGAIN` otherwise).
    case immediate(Bool)
    /// `ZMQ_RECONNECT_IVL` and `ZMQ_RECONNECT_IVL_MAX` in milliseconds (exponential backoff up to max).
    case reconnect(intervalMilliseconds: Int32, maxMilliseconds: Int32)
    /// `ZMQ_MAXMSGSIZE` (an `int64_t` option): a peer sending a larger message is disconnected.
    case maxMessageSize(Int64)
    /// `ZMQ_SNDHWM`: messages queued per peer before sends would block (0 = unlimited).
    case sendHighWaterMark(Int32)
    /// `ZMQ_RCVHWM`: messages queued per peer on receive (0 = unlimited).
    case receiveHighWaterMark(Int32)
    /// ZMTP heartbeats (`ZMQ_HEARTBEAT_IVL`, `_TIMEOUT`, `_TTL`) in milliseconds: they close dead TCP
    /// connections; they do not detect a hung process (libzmq answers pings on its own thread).
    case heartbeat(intervalMilliseconds: Int32, timeoutMilliseconds: Int32, ttlMilliseconds: Int32)
    /// `ZMQ_HANDSHAKE_IVL` in milliseconds.
    case handshakeInterval(milliseconds: Int32)
    /// `ZMQ_SUBSCRIBE` for SUB sockets.
    case subscribe([UInt8])
    /// `ZMQ_CURVE_SERVER` and `ZMQ_CURVE_SECRETKEY` (Z85): this socket is a CURVE server. Set before
    /// `bind`: a listener copies its options when it binds.
    case curveServer(secretKey: String)
    /// `ZMQ_CURVE_SERVERKEY`, `ZMQ_CURVE_PUBLICKEY` and `ZMQ_CURVE_SECRETKEY` (Z85): this socket is a
    /// CURVE client of the server with that public key. Set before `connect`.
    case curveClient(serverKey: String, publicKey: String, secretKey: String)
    /// `ZMQ_ZAP_DOMAIN`: the domain a server socket's handshakes are authenticated in (ZAP, RFC 27).
    case zapDomain(String)
    /// `ZMQ_ZAP_ENFORCE_DOMAIN` (93, a DRAFT option that Debian's 4.3.4 accepts by number): with a
    /// domain set, a handshake is refused when no ZAP handler is bound, instead of accepted.
    case zapEnforceDomain(Bool)
    /// `ZMQ_RECONNECT_STOP` (109, DRAFT, accepted by number on 4.3.4) with
    /// `ZMQ_RECONNECT_STOP_HANDSHAKE_FAILED`: a client stops reconnecting after a failed handshake
    /// (a wrong server key would otherwise retry forever).
    case reconnectStopAfterFailedHandshake

    func apply(to socket: UnsafeMutableRawPointer) -> Int32 {
        switch self {
        case .routingID(let bytes): return Self.setBytes(socket, ZMQ_ROUTING_ID, bytes)
        case .linger(let ms): return Self.setInt(socket, ZMQ_LINGER, ms)
        case .routerMandatory(let on): return Self.setInt(socket, ZMQ_ROUTER_MANDATORY, on ? 1 : 0)
        case .routerHandover(let on): return Self.setInt(socket, ZMQ_ROUTER_HANDOVER, on ? 1 : 0)
        case .immediate(let on): return Self.setInt(socket, ZMQ_IMMEDIATE, on ? 1 : 0)
        case .reconnect(let ivl, let max):
            let rc = Self.setInt(socket, ZMQ_RECONNECT_IVL, ivl)
            return rc != 0 ? rc : Self.setInt(socket, ZMQ_RECONNECT_IVL_MAX, max)
        case .maxMessageSize(let size):
            var value = size
            return zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &value, MemoryLayout<Int64>.size)
        case .sendHighWaterMark(let n): return Self.setInt(socket, ZMQ_SNDHWM, n)
        case .receiveHighWaterMark(let n): return Self.setInt(socket, ZMQ_RCVHWM, n)
        case .heartbeat(let ivl, let timeout, let ttl):
            var rc = Self.setInt(socket, ZMQ_HEARTBEAT_IVL, ivl)
            if rc == 0 { rc = Self.setInt(socket, ZMQ_HEARTBEAT_TIMEOUT, timeout) }
            if rc == 0 { rc = Self.setInt(socket, ZMQ_HEARTBEAT_TTL, ttl) }
            return rc
        case .handshakeInterval(let ms): return Self.setInt(socket, ZMQ_HANDSHAKE_IVL, ms)
        case .subscribe(let prefix): return Self.setBytes(socket, ZMQ_SUBSCRIBE, prefix)
        case .curveServer(let secretKey):
            let rc = Self.setInt(socket, ZMQ_CURVE_SERVER, 1)
            return rc != 0 ? rc : Self.setString(socket, ZMQ_CURVE_SECRETKEY, secretKey)
        case .curveClient(let serverKey, let publicKey, let secretKey):
            var rc = Self.setString(socket, ZMQ_CURVE_SERVERKEY, serverKey)
            if rc == 0 { rc = Self.setString(socket, ZMQ_CURVE_PUBLICKEY, publicKey) }
            if rc == 0 { rc = Self.setString(socket, ZMQ_CURVE_SECRETKEY, secretKey) }
            return rc
        case .zapDomain(let domain): return Self.setBytes(socket, ZMQ_ZAP_DOMAIN, Array(domain.utf8))
        case .zapEnforceDomain(let on): return Self.setInt(socket, Self.zapEnforceDomain, on ? 1 : 0)
        case .reconnectStopAfterFailedHandshake: return Self.setInt(socket, Self.reconnectStop, 2)
        }
    }

    /// `ZMQ_ZAP_ENFORCE_DOMAIN` and `ZMQ_RECONNECT_STOP`: their `#define`s are in zmq.h's DRAFT block,
    /// but libzmq 4.3.4 handles both outside it (security.md §1.5). A test proves the fail-closed
    /// behaviour, so a libzmq that changes it fails CI.
    static let zapEnforceDomain: Int32 = 93
    static let reconnectStop: Int32 = 109

    /// A Z85 key as the 41-byte C string libzmq takes (40 characters and a NUL).
    private static func setString(_ socket: UnsafeMutableRawPointer, _ option: Int32, _ text: String) -> Int32 {
        text.withCString { zmq_setsockopt(socket, option, $0, strlen($0) + 1) }
    }

    private static func setInt(_ socket: UnsafeMutableRawPointer, _ option: Int32, _ value: Int32) -> Int32 {
        var v = value
        return zmq_setsockopt(socket, option, &v, MemoryLayout<Int32>.size)
    }

    private static func setBytes(_ socket: UnsafeMutableRawPointer, _ option: Int32, _ bytes: [UInt8]) -> Int32 {
        bytes.withUnsafeBytes { zmq_setsockopt(socket, option, $0.baseAddress, $0.count) }
    }
}

extension SocketOption: CustomStringConvertible {
    /// The option for logs and errors; secret keys are never shown.
    public var description: String {
        switch self {
        case .curveServer: "curveServer(secretKey: <secret>)"
        case .curveClient(let serverKey, let publicKey, _):
            "curveClient(serverKey: \(serverKey), publicKey: \(publicKey), secretKey: <secret>)"
        case .routingID(let bytes): "routingID(\(String(decoding: bytes, as: UTF8.self)))"
        default: "\(Mirror(reflecting: self).children.first?.label ?? "option")"
        }
    }
}
