import DequeModule
import SkyNetCore
import ZeroMQ

// Messages sent at once or parked: what a socket could not take yet (`EAGAIN`) waits per peer, in
// order, until ``flush(on:)`` (a parked peer's later messages park behind it); a peer found gone is
// reported. Gathering into BATCHes is in Outbox.swift.
extension Outbox {
    /// Sends `frames` to `peer` now, after what was gathered for it, and tells what became of them.
    mutating func sendNow(_ frames: [[UInt8]], to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        if try self.sendPending(peer, on: socket) == .unreachable { return .unreachable }
        return try self.send(frames, to: peer, on: socket)
    }

    /// Sends `frames` to `peer` (with its routing id first on a ROUTER), or parks them behind earlier
    /// parked messages for that peer.
    mutating func send(_ frames: [[UInt8]], to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        if self.queues[peer] != nil {
            self.park(frames, for: peer)
            return .parked
        }
        switch try socket.send(peer == Self.direct ? frames : [peer.bytes] + frames) {
        case .sent: return .sent
        case .wouldBlock:
            self.park(frames, for: peer)
            return .parked
        case .hostUnreachable: return .unreachable
        }
    }

    /// Forwards frames `start...` of `message` to `peer` without copying them, unless they must be
    /// parked (then they are copied).
    mutating func forward(
        _ message: inout Multipart,
        from start: Int,
        to peer: PeerID,
        on socket: Socket
    )
        throws(ZMQError) -> Outcome
    {
        if self.queues[peer] == nil {
            let prefix = peer == Self.direct ? [] : [peer.bytes]
            switch try socket.send(prefix: prefix, forwarding: &message, from: start) {
            case .sent: return .sent
            case .hostUnreachable: return .unreachable
            case .wouldBlock: break
            }
        }
        self.park(message.allBytes(from: start), for: peer)
        return .parked
    }

    mutating func park(_ frames: [[UInt8]], for peer: PeerID) {
        self.queues[peer, default: []].append(frames)
        self.count += 1
    }

    /// Sends what it can, in order. Returns the peers found unreachable (their messages are dropped:
    /// the caller requeues their work).
    mutating func flush(on socket: Socket) throws(ZMQError) -> [PeerID] {
        var unreachable: [PeerID] = []
        for peer in Array(self.queues.keys) {
            peerLoop: while let frames = self.queues[peer]?.first {
                switch try socket.send(peer == Self.direct ? frames : [peer.bytes] + frames) {
                case .sent:
                    self.queues[peer]!.removeFirst()
                    self.count -= 1
                case .wouldBlock:
                    break peerLoop
                case .hostUnreachable:
                    self.count -= self.queues[peer]!.count
                    self.queues[peer] = nil
                    unreachable.append(peer)
                    break peerLoop
                }
            }
            if self.queues[peer]?.isEmpty == true { self.queues[peer] = nil }
        }
        return unreachable
    }
}
