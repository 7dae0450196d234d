import DequeModule
import ZeroMQ

/// Everything a socket sends goes through here. Small messages for a peer are gathered during one
/// turn of the reactor and leave together as one BATCH (``Batch``) when the reactor is about to poll
/// (``flushPending(on:)``); messages a socket could not take yet (`EAGAIN`: peer at its high-water
/// mark, or not connected) are parked in order per peer and flushed later. Nothing is dropped
/// silently: a peer that is gone (`EHOSTUNREACH`) is reported to the caller.
struct Outbox {
    /// The key for a DEALER socket, which has no routing-id frame.
    static let direct = PeerID([])
    /// Messages larger than this travel alone (a RESULT's payload is then forwarded without a copy).
    static let batchableBytes = 16 << 10
    /// A peer's gathered messages leave at once when they reach this size…
    static let batchBytes = 256 << 10

    private var queues: [PeerID: Deque<[[UInt8]]>] = [:]
    private(set) var count = 0

    /// Messages gathered for a peer in this turn of the reactor.
    private struct Pending {
        /// The first message, kept as it is: one message alone is sent without a BATCH around it.
        var single: [[UInt8]]?
        var batch = Batch.Writer()
    }
    private var pending: [PeerID: Pending] = [:]
    /// Peers with gathered messages, in the order they got their first.
    private var pendingPeers: [PeerID] = []

    /// No message is parked (gathered ones leave at the next ``flushPending(on:)``).
    var isEmpty: Bool { self.count == 0 }
    var hasPending: Bool { !self.pending.isEmpty }

    enum Outcome: Equatable {
        case sent
        /// Gathered for a BATCH; it leaves at the next ``flushPending(on:)``.
        case gathered
        case parked
        case unreachable
    }

    /// Gathers `frames` for `peer` (sent as they are when they are large, after what was gathered).
    mutating func enqueue(_ frames: [[UInt8]], to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        var size = 0
        for frame in frames { size += frame.count }
        guard size <= Self.batchableBytes, frames.count <= Batch.maxFramesPerMessage else {
            if try self.sendPending(peer, on: socket) == .unreachable { return .unreachable }
            return try self.send(frames, to: peer, on: socket)
        }
        guard self.pending[peer] != nil else {
            self.pending[peer] = Pending(single: frames)
            self.pendingPeers.append(peer)
            return .gathered
        }
        return try self.enqueue(to: peer, on: socket) { $0.append(frames) }
    }

    /// Gathers a message already in packed form (from a received BATCH) for `peer`; it leaves in a
    /// BATCH (of one, if nothing else is gathered for the peer by then).
    mutating func enqueue(
        packed: UnsafeRawBufferPointer,
        to peer: PeerID,
        on socket: Socket
    ) throws(ZMQError) -> Outcome {
        try self.enqueue(to: peer, on: socket) { $0.append(packed: packed) }
    }

    /// Gathers a message that `write` appends straight to `peer`'s BATCH (it must stay small); a full
    /// BATCH leaves at once.
    mutating func enqueue(
        to peer: PeerID,
        on socket: Socket,
        writing write: (inout Batch.Writer) -> Void
    ) throws(ZMQError) -> Outcome {
        if self.pending[peer] == nil {
            self.pending[peer] = Pending()
            self.pendingPeers.append(peer)
        }
        // In place: a copy of the entry would copy its bytes on every append.
        if let single = self.pending[peer]!.single {
            self.pending[peer]!.batch.append(single)
            self.pending[peer]!.single = nil
        }
        write(&self.pending[peer]!.batch)
        let batch = self.pending[peer]!.batch
        if batch.count >= Batch.maxMessages || batch.bytes.count >= Self.batchBytes {
            return try self.sendPending(peer, on: socket) ?? .gathered
        }
        return .gathered
    }

    /// Gathers frames `start...` of a received message for `peer`, or forwards them without copying
    /// when they are large (after what was gathered for the peer).
    mutating func enqueue(
        _ message: inout Multipart,
        from start: Int,
        to peer: PeerID,
        on socket: Socket
    ) throws(ZMQError) -> Outcome {
        var size = 0
        for index in start..<message.count { size += message.size(of: index) }
        guard size <= Self.batchableBytes, message.count - start <= Batch.maxFramesPerMessage else {
            if try self.sendPending(peer, on: socket) == .unreachable { return .unreachable }
            return try self.forward(&message, from: start, to: peer, on: socket)
        }
        return try self.enqueue(message.allBytes(from: start), to: peer, on: socket)
    }

    /// Sends everything gathered, one message or one BATCH per peer. Returns the peers found
    /// unreachable (what was gathered for them is dropped: the caller requeues their work) and
    /// whether anything had to be parked.
    /// - Parameter holding: peers whose messages stay gathered for a later flush.
    mutating func flushPending(
        on socket: Socket,
        holding: (PeerID) -> Bool = { _ in false }
    ) throws(ZMQError) -> (unreachable: [PeerID], parked: Bool) {
        var unreachable: [PeerID] = []
        var parked = false
        let peers = self.pendingPeers
        self.pendingPeers.removeAll(keepingCapacity: true)
        for peer in peers where self.pending[peer] != nil {
            if holding(peer) {
                self.pendingPeers.append(peer)
                continue
            }
            switch try self.sendPending(peer, on: socket) {
            case .unreachable: unreachable.append(peer)
            case .parked: parked = true
            case .sent, .gathered, nil: break
            }
        }
        return (unreachable, parked)
    }

    /// Sends what was gathered for `peer` (nil when nothing was). The peer may stay listed in
    /// `pendingPeers`; a flush skips peers with nothing gathered.
    private mutating func sendPending(_ peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome? {
        guard let entry = self.pending.removeValue(forKey: peer) else { return nil }
        return try self.send(entry.single ?? entry.batch.frames(), to: peer, on: socket)
    }

    /// Sends `frames` to `peer` now, after what was gathered for it, and tells what became of them.
    mutating func sendNow(_ frames: [[UInt8]], to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        if try self.sendPending(peer, on: socket) == .unreachable { return .unreachable }
        return try self.send(frames, to: peer, on: socket)
    }

    /// Sends `frames` to `peer` (with its routing id first on a ROUTER), or parks them behind earlier
    /// parked messages for that peer.
    private mutating func send(_ frames: [[UInt8]], to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
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
    private mutating func forward(
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

    /// Forgets everything gathered and parked for `peer`.
    mutating func drop(_ peer: PeerID) {
        if let queue = self.queues.removeValue(forKey: peer) { self.count -= queue.count }
        self.pending[peer] = nil
    }

    /// Forgets everything.
    mutating func removeAll() {
        self.queues.removeAll()
        self.count = 0
        self.pending.removeAll()
        self.pendingPeers.removeAll()
    }
}
