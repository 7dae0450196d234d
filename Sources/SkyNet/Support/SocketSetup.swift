import SkyNetCore
import ZeroMQ

/// Socket options shared by SkyNet's sockets (DESIGN.md §6).
enum SocketSetup {
    /// A broker ROUTER: mandatory routing (no silent drops), handover for reconnecting peers.
    static func router(_ socket: Socket) throws(ZMQError) {
        try socket.set(.linger(milliseconds: 0))
        try socket.set(.routerMandatory(true))
        try socket.set(.routerHandover(true))
        try socket.set(.maxMessageSize(ProtocolLimits.maxMessageSize))
        try socket.set(.sendHighWaterMark(100_000))
        try socket.set(.receiveHighWaterMark(100_000))
        try socket.set(.heartbeat(intervalMilliseconds: 1000, timeoutMilliseconds: 3000, ttlMilliseconds: 3000))
        try socket.set(.handshakeInterval(milliseconds: 5000))
    }

    /// A worker or coordinator DEALER: its own routing id, queue only on live connections, reconnect
    /// 100 ms backing off to 5 s.
    static func dealer(_ socket: Socket, id: PeerID) throws(ZMQError) {
        try socket.set(.routingID(id.bytes))
        try socket.set(.linger(milliseconds: 0))
        try socket.set(.immediate(true))
        try socket.set(.reconnect(intervalMilliseconds: 100, maxMilliseconds: 5000))
        try socket.set(.maxMessageSize(ProtocolLimits.maxMessageSize))
        try socket.set(.sendHighWaterMark(100_000))
        try socket.set(.receiveHighWaterMark(100_000))
        try socket.set(.heartbeat(intervalMilliseconds: 1000, timeoutMilliseconds: 3000, ttlMilliseconds: 3000))
        try socket.set(.handshakeInterval(milliseconds: 5000))
    }
}
