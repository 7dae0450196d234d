import SkyNetCore
import ZeroMQ

// A BATCH's bytes onto the socket: routed or not, in one frame or two. Static, from the parts the
// outbox lends (Outbox.swift gathers the messages; Outbox+Parking.swift keeps what could not go).
extension Outbox {
    /// Sends `body` (a writer's packed messages, read in place) as a BATCH (with the header in
    /// `header`). Static, with its parts passed in: as a method of the outbox, called from a mutating
    /// one, it was handed a copy of the whole outbox (its queues, slots and index: ~200 instructions
    /// and a dozen retains a send).
    static func send(
        _ body: UnsafeRawBufferPointer,
        header: UnsafeRawBufferPointer,
        oneFrame: Bool,
        to peer: PeerID,
        on socket: Socket
    ) -> Result<SendStatus, ZMQError> {
        if peer == Self.direct {
            return Self.send(body, header: header, oneFrame: oneFrame, routing: nil, on: socket)
        }
        // The id spelled on the stack here (``PeerID/write(compactInto:)``), not lent by the generic
        // ``PeerID/withUnsafeBytes(_:)``, which is not specialized across the module boundary.
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &words) { raw in
            guard let count = peer.write(compactInto: raw) else {
                return peer.withUnsafeBytes {
                    Self.send(body, header: header, oneFrame: oneFrame, routing: $0, on: socket)
                }
            }
            let routing = UnsafeRawBufferPointer(rebasing: raw[..<count])
            return Self.send(body, header: header, oneFrame: oneFrame, routing: routing, on: socket)
        }
    }

    static func send(
        _ body: UnsafeRawBufferPointer,
        header: UnsafeRawBufferPointer,
        oneFrame: Bool,
        routing: UnsafeRawBufferPointer?,
        on socket: Socket
    ) -> Result<SendStatus, ZMQError> {
        if oneFrame {
            return Result { () throws(ZMQError) -> SendStatus in
                try socket.send(routing: routing, joining: header, body)
            }
        }
        return withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: 2) { frames in
            frames.initializeElement(at: 0, to: header)
            frames.initializeElement(at: 1, to: body)
            return Result { () throws(ZMQError) -> SendStatus in
                try socket.send(routing: routing, frames: UnsafeBufferPointer(frames))
            }
        }
    }
}
