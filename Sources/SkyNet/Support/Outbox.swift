import DequeModule
import ZeroMQ

/// Messages a socket could not take yet (`EAGAIN`: peer at its high-water mark, or not connected),
/// kept in order per peer and flushed later. Nothing is dropped silently: every send goes through
/// here, and a peer that is gone (`EHOSTUNREACH`) is reported to the caller.
struct Outbox {
    /// The key for a DEALER socket, which has no routing-id frame.
    static let direct = PeerID([])

    private var queues: [PeerID: Deque<[[UInt8]]>] = [:]
    private(set) var count = 0

    var isEmpty: Bool { self.count == 0 }

    enum Outcome: Equatable {
        case sent
        case parked
        case unreachable
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

    private mutating func park(_ frames: [[UInt8]], for peer: PeerID) {
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

    /// Forgets everything parked for `peer`.
    mutating func drop(_ peer: PeerID) {
        if let queue = self.queues.removeValue(forKey: peer) { self.count -= queue.count }
    }

    /// Forgets everything.
    mutating func removeAll() {
        self.queues.removeAll()
        self.count = 0
    }
}
