import SkyNetCore
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

    /// Messages parked per peer, in order, and how many in all (``Outbox+Parking.swift``; internal for
    /// that file alone).
    var queues: [PeerID: Deque<[[UInt8]]>] = [:]
    var count = 0

    /// Messages gathered for a peer in this turn of the reactor, packed one after the other as in a
    /// BATCH. The writers are kept and reused (changed in place in the array), so gathering and
    /// sending allocate nothing once they have grown.
    private struct Gathering {
        var peer: PeerID
        var batch = Batch.Writer()
        /// Gathering for `peer` now (listed in `gatheringOrder`), not free or given up.
        var active = false
    }
    private var gathering: [Gathering] = []
    /// How many slots are active.
    private var activeSlots = 0
    /// The active slots by peer, kept only while more than ``scannedSlots`` are listed in
    /// `gatheringOrder` (a broker's turn with many peers); fewer are found by looking through the
    /// list. A turn has one to three peers most often (a DEALER's is always the one), and a
    /// dictionary cost a hash and a probe to take a slot, another to find it at the flush and a
    /// removal: ~1,360 instructions a latency round trip on the cluster's reactor, ~930 on a
    /// coordinator's.
    private var gatheringIndex: [PeerID: Int] = [:]
    private var indexed = false
    static let scannedSlots = 8
    private var freeGathering: [Int] = []
    /// The slot ``slot(for:)`` gave last: active, or freed since (`lastSlotSpare`), when it still
    /// names its peer until another slot is given or another peer takes it.
    private var lastSlot: Int?
    /// Whether ``lastSlot`` is free: kept aside for its peer's next message rather than listed in
    /// `freeGathering`, which is for the other free slots. Most turns gather for the peer of the turn
    /// before (a DEALER's only one, a broker's one worker or coordinator): taking the slot back out
    /// of that list and listing it again at each BATCH cost ~40 instructions.
    private var lastSlotSpare = false
    /// Slots with gathered messages, in the order their peers got their first (and slots given up
    /// since, which are skipped: inactive, or listed again later for another peer).
    private var gatheringOrder: [Int] = []
    /// Who is sent a BATCH as one frame (``Batch/Form``): the routed peers whose two-frame BATCHes
    /// said they read it, and, on a DEALER, whether the broker's last BATCH came as one frame.
    private var oneFramePeers: Set<PeerID> = [] {
        didSet { self.lastAsked = nil }
    }
    /// The peer ``readsOneFrame(_:)`` was asked about last, and the answer; forgotten whenever
    /// `oneFramePeers` changes. A broker's outbox sends to the same worker or coordinator turn after
    /// turn, and comparing the id costs less than hashing it (~145 instructions a BATCH sent).
    private var lastAsked: (peer: PeerID, readsOneFrame: Bool)?
    private var brokerSendsOneFrame = false

    /// How many gathering slots there are, free ones too (for tests).
    var slotCount: Int { self.gathering.count }

    /// The request of the hook that flushes this outbox (``requestFlushes(with:)``), raised whenever
    /// something is gathered. Unretained: the owner holds the request as long as the outbox.
    private var flushRequest: Unmanaged<PollRequest>?

    /// Raises `request` whenever a message is gathered, and after a flush that leaves some gathered
    /// (held back): its hook (``Reactor/beforePoll(when:_:)``) flushes the outbox. The caller keeps
    /// `request` alive as long as the outbox.
    mutating func requestFlushes(with request: PollRequest) {
        self.flushRequest = Unmanaged.passUnretained(request)
    }

    private func raiseFlushRequest() {
        self.flushRequest?._withUnsafeGuaranteedRef { $0.raise() }
    }

    /// No message is parked (gathered ones leave at the next ``flushPending(on:)``).
    var isEmpty: Bool { self.count == 0 }
    var hasPending: Bool { self.activeSlots > 0 }

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
        return try self.enqueue(to: peer, on: socket) { $0.append(frames) }
    }

    /// Gathers `message` for `peer`: a small one of the hot path written straight into the peer's
    /// BATCH, any other encoded first (and sent as it is when large, after what was gathered).
    mutating func enqueue(_ message: WireMessage, to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        if let size = message.directSize, size <= Self.batchableBytes {
            return try self.enqueue(to: peer, on: socket) { $0.append(message) }
        }
        return try self.enqueue(message.encode(), to: peer, on: socket)
    }

    /// ``enqueue(_:to:on:)`` for a RESULT, written from its parts without making the message first
    /// when it is small (the same rule).
    mutating func enqueueResult(
        _ id: TaskID,
        attempt: UInt32,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: UnsafeRawBufferPointer,
        to peer: PeerID,
        on socket: Socket
    ) throws(ZMQError) -> Outcome {
        guard WireMessage.resultSize(meta, bodyCount: body.count) <= Self.batchableBytes else {
            return try self.enqueue(
                .result(id, attempt: attempt, status, meta, body: Array(body)),
                to: peer,
                on: socket
            )
        }
        return try self.enqueue(to: peer, on: socket) {
            $0.appendResult(id, attempt: attempt, status, meta, body: body)
        }
    }

    /// ``enqueue(_:to:on:)`` for a task's SUBMIT, written from the task without making the message
    /// first when it is small (the same rule).
    mutating func enqueueSubmit(
        _ task: UnsafePointer<ScanTask>,
        to peer: PeerID,
        on socket: Socket
    ) throws(ZMQError) -> Outcome {
        guard WireMessage.taskSize(kind: task.pointee.kind, inputCount: task.pointee.input.count) <= Self.batchableBytes
        else {
            let task = task.pointee
            return try self.enqueue(
                .submit(task.id, attempt: task.attempt, task.envelope, input: task.input),
                to: peer,
                on: socket
            )
        }
        return try self.enqueue(to: peer, on: socket) { $0.appendSubmit(task) }
    }

    /// Gathers a message already in packed form (from a received BATCH) for `peer`.
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
        guard self.gather(to: peer, writing: write) else { return .gathered }
        return try self.sendFull(peer, on: socket)
    }

    /// ``enqueue(to:on:writing:)`` without the socket, for a caller that takes it out only when it is
    /// needed: gathers, and returns whether `peer`'s BATCH is full, which must then leave at once
    /// (``sendFull(_:on:)``).
    mutating func gather(to peer: PeerID, writing write: (inout Batch.Writer) -> Void) -> Bool {
        let slot = self.slot(for: peer)
        write(&self.gathering[slot].batch)
        self.raiseFlushRequest()
        // (Read in place: a copy of the writer alive while it is reset would copy its storage.)
        return self.gathering[slot].batch.count >= Batch.maxMessages
            || self.gathering[slot].batch.byteCount >= Self.batchBytes
    }

    /// Sends `peer`'s full BATCH (``gather(to:writing:)``).
    mutating func sendFull(_ peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        try self.sendPending(peer, on: socket) ?? .gathered
    }

    /// The slot gathering for `peer`, taken when it has none.
    private mutating func slot(for peer: PeerID) -> Int {
        // Most messages of a turn go to the peer of the one before (a coordinator's RESULTs, a
        // worker's TASKs), and most turns to the peer of the turn before (a DEALER's only one, a
        // broker's one worker or coordinator): that slot is checked before any other. Freed since,
        // it was kept aside for that peer (``lastSlotSpare``) and is taken again.
        if let last = self.lastSlot, self.gathering[last].peer == peer {
            if self.gathering[last].active { return last }
            if self.lastSlotSpare {
                self.lastSlotSpare = false
                return self.activate(last, for: peer)
            }
        }
        if let slot = self.activeSlot(of: peer) {
            self.setLast(slot)
            return slot
        }
        let slot: Int
        if let free = self.freeGathering.popLast() {
            slot = free
            self.gathering[slot].peer = peer
        } else if self.lastSlotSpare, let last = self.lastSlot {
            self.lastSlotSpare = false
            slot = last
            self.gathering[slot].peer = peer
        } else {
            slot = self.gathering.count
            self.gathering.append(Gathering(peer: peer))
        }
        return self.activate(slot, for: peer)
    }

    /// Lists `slot` (free, named for `peer`) as gathering for `peer`, and returns it.
    private mutating func activate(_ slot: Int, for peer: PeerID) -> Int {
        self.gathering[slot].active = true
        self.activeSlots += 1
        self.gatheringOrder.append(slot)
        if self.indexed {
            self.gatheringIndex[peer] = slot
        } else if self.gatheringOrder.count > Self.scannedSlots {
            // First the listings given up go (a deep job's turn sends its workers' BATCHes after each
            // BATCH of SUBMITs, and lists them again): only many peers at once need the index.
            self.gatheringOrder.removeAll { !self.gathering[$0].active }
            if self.gatheringOrder.count > Self.scannedSlots {
                for listed in self.gatheringOrder where self.gathering[listed].active {
                    self.gatheringIndex[self.gathering[listed].peer] = listed
                }
                self.indexed = true
            }
        }
        self.setLast(slot)
        return slot
    }

    /// Makes `slot` (active) ``lastSlot``; the one before goes to the free list if it was spare.
    private mutating func setLast(_ slot: Int) {
        if self.lastSlotSpare, let last = self.lastSlot, last != slot {
            self.freeGathering.append(last)
            self.lastSlotSpare = false
        }
        self.lastSlot = slot
    }

    /// The active slot gathering for `peer`, if any.
    private func activeSlot(of peer: PeerID) -> Int? {
        if self.indexed { return self.gatheringIndex[peer] }
        for index in self.gatheringOrder.indices {
            let slot = self.gatheringOrder[index]
            if self.gathering[slot].active && self.gathering[slot].peer == peer { return slot }
        }
        return nil
    }

    /// Gives up `slot` (active, gathering for `peer`): its batch is sent or dropped next, then it is
    /// freed.
    private mutating func deactivate(_ slot: Int, of peer: PeerID) {
        self.gathering[slot].active = false
        self.activeSlots -= 1
        if self.indexed { self.gatheringIndex[peer] = nil }
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
        return try message.withFrames(from: start) { frames throws(ZMQError) in
            try self.enqueue(to: peer, on: socket) { $0.append(frames: frames) }
        }
    }

    /// Sends everything gathered, one BATCH per peer. Returns the peers found
    /// unreachable (what was gathered for them is dropped: the caller requeues their work) and
    /// whether anything had to be parked.
    /// - Parameter holding: peers whose messages stay gathered for a later flush.
    mutating func flushPending(
        on socket: Socket,
        holding: (PeerID) -> Bool = { _ in false }
    ) throws(ZMQError) -> (unreachable: [PeerID], parked: Bool) {
        var unreachable: [PeerID] = []
        var parked = false
        var kept = 0
        var index = 0
        // In order; the slots held back stay listed at the front, in their order.
        while index < self.gatheringOrder.count {
            let slot = self.gatheringOrder[index]
            index += 1
            // A slot given up (sent early, dropped) is inactive, or active again for another peer and
            // listed again (it goes at its first listing, then is inactive at the next).
            guard self.gathering[slot].active else { continue }
            let peer = self.gathering[slot].peer
            if holding(peer) {
                self.gatheringOrder[kept] = slot
                kept += 1
                continue
            }
            self.deactivate(slot, of: peer)
            switch try self.sendGathered(slot, to: peer, on: socket) {
            case .unreachable: unreachable.append(peer)
            case .parked: parked = true
            case .sent, .gathered: break
            }
        }
        self.gatheringOrder.truncate(to: kept)
        if kept > 0 { self.raiseFlushRequest() }
        if self.indexed && self.gatheringOrder.count <= Self.scannedSlots {
            self.gatheringIndex.removeAll(keepingCapacity: true)
            self.indexed = false
        }
        return (unreachable, parked)
    }

    /// Sends what was gathered for `peer` (nil when nothing was) as one BATCH. Its slot may stay
    /// listed in `gatheringOrder`; a flush skips slots given up.
    mutating func sendPending(_ peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome? {
        guard let slot = self.activeSlot(of: peer) else { return nil }
        self.deactivate(slot, of: peer)
        return try self.sendGathered(slot, to: peer, on: socket)
    }

    /// What a BATCH received from `peer` on a ROUTER says of it (the rule of who is sent the one-frame
    /// form, with ``heardFromBroker(_:)``): a two-frame one, whether its sender reads the one-frame
    /// form (its flag; a build before has none). A one-frame BATCH changes nothing: its sender was
    /// sent one-frame BATCHes (so it is known here), or this broker restarted and sent it two-frame
    /// ones, which it answers in two frames with the flag, and is known from then on. So the hot
    /// path (one frame each way) asks nothing here.
    ///
    /// Peers are forgotten when the machine drops them (``drop(_:)``: every loss, expiry included).
    /// A bound stays all the same, for peers heard from that the machine never took in (an unknown
    /// worker's BATCH, a refused coordinator's), which it never drops: past ``oneFramePeersLimit``
    /// the set starts again empty, and the peers still there are sent two frames until their
    /// answers (two frames, flagged: ``heardFromBroker(_:)``) teach it again.
    mutating func heard(_ form: Batch.Form, from peer: PeerID) {
        guard case .twoFrames(let readsOneFrame) = form else { return }
        guard readsOneFrame else {
            self.oneFramePeers.remove(peer)
            return
        }
        if self.oneFramePeers.count >= Self.oneFramePeersLimit { self.oneFramePeers.removeAll() }
        self.oneFramePeers.insert(peer)
    }

    /// Whether routed `peer` is sent one-frame BATCHes (it is in `oneFramePeers`).
    private mutating func readsOneFrame(_ peer: PeerID) -> Bool {
        if let last = self.lastAsked, last.peer == peer { return last.readsOneFrame }
        let reads = !self.oneFramePeers.isEmpty && self.oneFramePeers.contains(peer)
        self.lastAsked = (peer, reads)
        return reads
    }

    /// Most peers remembered as reading one-frame BATCHes (~40 bytes each).
    static let oneFramePeersLimit = 1 << 16

    /// What a BATCH received on a DEALER says of its broker: a DEALER sends one-frame BATCHes while
    /// its broker's last came as one frame. A broker sends them only to a peer it knows reads them,
    /// and learns that from the peer's two-frame BATCHes (``heard(_:from:)``), which it gets again
    /// after it restarted (its two-frame BATCHes turn this back).
    mutating func heardFromBroker(_ form: Batch.Form) {
        switch form {
        case .oneFrame: self.brokerSendsOneFrame = true
        case .twoFrames: self.brokerSendsOneFrame = false
        case .notBatch: break
        }
    }

    /// Sends what `slot` gathered for `peer` (deactivated) and frees the slot.
    ///
    /// Always as a BATCH, one message too: a BATCH is two frames (header, packed messages) where a
    /// lone SUBMIT, TASK or RESULT is three, and each frame costs a `zmq_msg_send` here, a
    /// `zmq_msg_recv` at the peer and its encoding and decoding in libzmq's I/O threads (a latency
    /// round trip sent 14 frames, now 10: ~4,000 fewer instructions, most of them in the I/O
    /// threads). Every receiver reads a BATCH of one like any other (§4). To a peer known to read it,
    /// one frame: the header with the packed messages after it (``heard(_:from:)``).
    private mutating func sendGathered(_ slot: Int, to peer: PeerID, on socket: Socket) throws(ZMQError) -> Outcome {
        defer { self.free(slot) }
        if self.queues[peer] == nil {
            let oneFrame =
                peer == Self.direct
                ? self.brokerSendsOneFrame : self.readsOneFrame(peer)
            // The header is laid out on the stack (an array kept for it was emptied and appended to
            // for every BATCH: ~130 instructions), here rather than through the generic
            // `Header.withBytes(framed:_:)`, which is not specialized across the module boundary.
            var raw: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            // The packed messages where the slot's writer keeps them, valid through the send: the
            // writer changes only when the slot is freed, after it (see
            // ``Batch/Writer/sendParts()``). Not the writer itself: passed on, it was copied
            // with its slot (~300 instructions a send once the writer had storage of its own).
            let (batchHeader, body) = self.gathering[slot].batch.sendParts()
            let sent = withUnsafeMutableBytes(of: &raw) { out in
                let count = batchHeader.write(into: out, framed: false)
                let header = UnsafeRawBufferPointer(rebasing: out[..<count])
                return Self.send(body, header: header, oneFrame: oneFrame, to: peer, on: socket)
            }
            switch try sent.get() {
            case .sent: return .sent
            case .hostUnreachable: return .unreachable
            case .wouldBlock: break
            }
        }
        // Behind earlier parked messages, or the socket cannot take it now: park a copy.
        self.park(self.gathering[slot].batch.frames(), for: peer)
        return .parked
    }

    /// Forgets everything gathered and parked for `peer`, and the form it reads.
    mutating func drop(_ peer: PeerID) {
        self.oneFramePeers.remove(peer)
        if let queue = self.queues.removeValue(forKey: peer) { self.count -= queue.count }
        if let slot = self.activeSlot(of: peer) {
            self.deactivate(slot, of: peer)
            self.free(slot)
        }
    }

    /// Empties a gathering slot (deactivated) for the next peer.
    private mutating func free(_ slot: Int) {
        // Slots are reused last freed first, so the first few serve the heaviest peers of a turn (a
        // coordinator's broker, a broker's busiest workers and coordinators): they keep room for a
        // whole BATCH. Regrowing a 70 KB BATCH of SUBMITs from empty every turn cost `skynet submit`
        // ~90 instructions a task; the others keep at most ``Batch/Writer/keptCapacity``, so that a
        // broker with many peers does not hold a BATCH's room for each.
        let limit = slot < Self.roomySlots ? Self.batchBytes + Self.batchableBytes : Batch.Writer.keptCapacity
        self.gathering[slot].batch.reset(keepingUpTo: limit)
        // Kept aside if it is ``lastSlot``: ``slot(for:)`` takes it again for the same peer.
        if slot == self.lastSlot {
            self.lastSlotSpare = true
        } else {
            self.freeGathering.append(slot)
        }
    }

    /// Gathering slots that keep room for a whole BATCH (see ``free(_:)``).
    static let roomySlots = 4

    /// Forgets everything.
    mutating func removeAll() {
        self.queues.removeAll()
        self.oneFramePeers.removeAll()
        self.brokerSendsOneFrame = false
        self.count = 0
        self.gathering.removeAll()
        self.gatheringIndex.removeAll()
        self.indexed = false
        self.activeSlots = 0
        self.freeGathering.removeAll()
        self.gatheringOrder.removeAll()
        self.lastSlot = nil
        self.lastSlotSpare = false
    }
}
