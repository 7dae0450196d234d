import Testing

@testable import ZeroMQ

@testable import SkyNet
@testable import SkyNetCore

/// The outbox over real sockets (inproc): what is gathered leaves as one BATCH per peer, in order,
/// large messages travel alone, and an unknown peer is reported at the flush.
@Suite("Outbox gathering")
struct OutboxTests {
    static let id = TaskID(high: 1, low: 2)

    /// A ROUTER bound on inproc and a DEALER connected to it (routing id "d").
    /// Runs `body` with a connected ROUTER/DEALER pair on a fresh context, closed after it.
    static func withPair(_ name: String, _ body: (Socket, Socket) throws -> Void) throws {
        let context = try ZMQContext()
        let (router, dealer) = try Self.pair(context, name)
        defer {
            dealer.close()
            router.close()
            context.terminate()
        }
        try body(router, dealer)
    }

    static func pair(_ context: ZMQContext, _ name: String) throws -> (router: Socket, dealer: Socket) {
        let router = try Socket(context, type: .router)
        try SocketSetup.router(router)
        try router.bind("inproc://\(name)")
        let dealer = try Socket(context, type: .dealer)
        try dealer.set(.routingID(Array("d".utf8)))
        try dealer.set(.linger(milliseconds: 0))
        try dealer.connect("inproc://\(name)")
        return (router, dealer)
    }

    /// The messages a ROUTER receives next (a BATCH unpacked), decoded.
    static func receive(_ router: Socket) throws -> [WireMessage] {
        let message = try router.receiveBlocking()
        #expect(message.bytes(of: 0) == Array("d".utf8))
        let decoded = try WireMessage.decode(message, from: 1)
        guard case .batch(let messages) = decoded else { return [decoded] }
        return try messages.map { try WireMessage.decode($0) }
    }

    @Test("small messages gathered in a turn leave as one BATCH, in order; one alone as a BATCH of one")
    func gathersIntoOneBatch() throws {
        try Self.withPair("outbox-gather") { router, dealer in
            var outbox = Outbox()
            let messages: [WireMessage] = [
                .heartbeat(epoch: 0),
                .result(
                    Self.id,
                    attempt: 1,
                    .completed,
                    ResultMeta(system: "w", durationMicroseconds: 1, slot: 0, busy: 1),
                    body: [1]
                ),
                .cancel(Self.id),
            ]
            for message in messages {
                #expect(try outbox.enqueue(message.encode(), to: Outbox.direct, on: dealer) == .gathered)
            }
            #expect(outbox.hasPending)
            let flushed = try outbox.flushPending(on: dealer)
            #expect(flushed.unreachable.isEmpty && !flushed.parked)
            #expect(!outbox.hasPending)
            let first = try router.receiveBlocking()
            #expect(first.count == 3)  // routing id, BATCH header, the packed messages
            guard case .batch(let packed) = try WireMessage.decode(first, from: 1) else {
                Issue.record("not a BATCH")
                return
            }
            #expect(try packed.map { try WireMessage.decode($0) } == messages)

            _ = try outbox.enqueue(WireMessage.cancel(Self.id).encode(), to: Outbox.direct, on: dealer)
            _ = try outbox.flushPending(on: dealer)
            let single = try router.receiveBlocking()
            #expect(single.count == 3)  // two frames, not the three of a lone CANCEL (one frame fewer a message)
            guard case .batch(let lone) = try WireMessage.decode(single, from: 1) else {
                Issue.record("one message alone did not leave as a BATCH")
                return
            }
            #expect(try lone.map { try WireMessage.decode($0) } == [.cancel(Self.id)])
        }
    }

    @Test(
        "one frame to a peer known to read it: a broker learns it from two-frame BATCHes, a dealer follows its broker's last"
    )
    func oneFrameBatches() throws {
        try Self.withPair("outbox-one-frame") { router, dealer in
            var toBroker = Outbox()  // the DEALER's
            var toDealer = Outbox()  // the ROUTER's
            let peer = PeerID(Array("d".utf8))
            /// Sends a CANCEL from `outbox` and checks the form it arrives in, and its contents.
            func exchange(
                _ outbox: inout Outbox,
                from socket: Socket,
                to receiver: Socket,
                routed: Bool,
                _ expected: Batch.Form,
                _ sourceLocation: SourceLocation
            ) throws {
                _ = try outbox.enqueue(.cancel(Self.id), to: routed ? peer : Outbox.direct, on: socket)
                _ = try outbox.flushPending(on: socket)
                let message = try receiver.receiveBlocking()
                let start = routed ? 0 : 1  // a ROUTER receives the routing id first
                var got: [WireMessage] = []
                let form = try WireMessage.visit(message, from: start, read: WireMessage.readNothing) {
                    if case .success(let decoded) = $0 { got.append(decoded) }
                    return true
                }
                #expect(got == [.cancel(Self.id)], sourceLocation: sourceLocation)
                #expect(WireMessage.batchForm(message, from: start) == form, sourceLocation: sourceLocation)
                #expect(form == expected, sourceLocation: sourceLocation)
            }
            func brokerSends(_ expected: Batch.Form, at location: SourceLocation = #_sourceLocation) throws {
                try exchange(&toDealer, from: router, to: dealer, routed: true, expected, location)
            }
            func dealerSends(_ expected: Batch.Form, at location: SourceLocation = #_sourceLocation) throws {
                try exchange(&toBroker, from: dealer, to: router, routed: false, expected, location)
            }
            let flagged = Batch.Form.twoFrames(senderReadsOneFrame: true)
            // Neither has heard the other: two frames, each saying its sender reads one.
            try dealerSends(flagged)
            try brokerSends(flagged)
            // The broker heard the dealer's flag: one frame from it on; the dealer follows.
            toDealer.heard(flagged, from: peer)
            try brokerSends(.oneFrame)
            try dealerSends(flagged)
            toBroker.heardFromBroker(.oneFrame)
            try dealerSends(.oneFrame)
            // A one-frame BATCH changes nothing at the broker; a peer of a build before (no flag) is
            // sent two frames again, as is one forgotten.
            toDealer.heard(.oneFrame, from: peer)
            try brokerSends(.oneFrame)
            toDealer.heard(.twoFrames(senderReadsOneFrame: false), from: peer)
            try brokerSends(flagged)
            toDealer.heard(flagged, from: peer)
            toDealer.drop(peer)
            try brokerSends(flagged)
            // A dealer whose broker sends two frames again (it restarted) sends two frames too.
            toBroker.heardFromBroker(flagged)
            try dealerSends(flagged)
            // Past its limit the broker's memory of them starts again (the peer then teaches it again).
            toDealer.heard(flagged, from: peer)
            for index in 1..<Outbox.oneFramePeersLimit {
                toDealer.heard(flagged, from: PeerID(Array("p\(index)".utf8)))
            }
            try brokerSends(.oneFrame)
            toDealer.heard(flagged, from: PeerID(Array("one more".utf8)))
            try brokerSends(flagged)
        }
    }

    @Test(
        "many peers in a turn: one BATCH each in the order of their first message; a dropped one's go nowhere, a held one's at the next flush; a full one leaves at once"
    )
    func manyPeers() throws {
        try Self.withPair("outbox-many") { router, dealer in
            var outbox = Outbox()
            let connected = PeerID(Array("d".utf8))
            // More peers than are found by looking through the list (then they are indexed); none of
            // them is connected, so each is reported unreachable at the flush, in the order sent.
            let others = (0..<(3 * Outbox.scannedSlots)).map { PeerID(Array("nobody-\($0)".utf8)) }
            func received() throws -> [WireMessage] {
                let decoded = try WireMessage.decode(try dealer.receiveBlocking(), from: 0)
                guard case .batch(let messages) = decoded else { return [decoded] }
                return try messages.map { try WireMessage.decode($0) }
            }
            var outcomes: [Outbox.Outcome] = []
            for round in 0..<3 {
                for (index, peer) in others.enumerated() {
                    _ = try outbox.enqueue(.cancel(TaskID(high: 9, low: UInt64(index))), to: peer, on: router)
                    guard index == Outbox.scannedSlots + 2 else { continue }
                    if round == 1 {
                        // A full BATCH for the connected peer leaves at once; its slot is reused.
                        for epoch in 0..<UInt32(Batch.maxMessages) {
                            outcomes.append(
                                try outbox.enqueue(.heartbeat(epoch: 1000 + epoch), to: connected, on: router)
                            )
                        }
                    }
                    _ = try outbox.enqueue(.heartbeat(epoch: UInt32(round)), to: connected, on: router)
                }
            }
            #expect(outcomes.filter { $0 == .sent }.count == 1)
            outbox.drop(others[3])
            let held = others[5]
            var flushed = try outbox.flushPending(on: router) { $0 == held }
            #expect(flushed.unreachable == others.filter { $0 != others[3] && $0 != held })
            let full = try received()
            #expect(full.first == .heartbeat(epoch: 0) && full.count == Batch.maxMessages)
            #expect(full.last == .heartbeat(epoch: 1000 + UInt32(Batch.maxMessages) - 2))
            #expect(
                try received() == [
                    .heartbeat(epoch: 1000 + UInt32(Batch.maxMessages) - 1), .heartbeat(epoch: 1), .heartbeat(epoch: 2),
                ]
            )
            #expect(outbox.hasPending)
            flushed = try outbox.flushPending(on: router)
            #expect(flushed.unreachable == [held] && !outbox.hasPending)
            // Few peers again: found by looking through the list.
            _ = try outbox.enqueue(.heartbeat(epoch: 7), to: connected, on: router)
            _ = try outbox.enqueue(.cancel(Self.id), to: others[0], on: router)
            _ = try outbox.enqueue(.heartbeat(epoch: 8), to: connected, on: router)
            flushed = try outbox.flushPending(on: router)
            #expect(flushed.unreachable == [others[0]] && !outbox.hasPending)
            #expect(try received() == [.heartbeat(epoch: 7), .heartbeat(epoch: 8)])
            // Few peers, many full BATCHes in a turn (each listed again after it left): still one
            // BATCH per peer at the flush, in order.
            _ = try outbox.enqueue(.cancel(Self.id), to: others[1], on: router)
            for epoch in 0..<UInt32(Batch.maxMessages * (Outbox.scannedSlots + 2) + 1) {
                _ = try outbox.enqueue(.heartbeat(epoch: epoch), to: connected, on: router)
                if epoch % 100 == 0 { _ = try outbox.enqueue(.cancel(Self.id), to: others[2], on: router) }
            }
            flushed = try outbox.flushPending(on: router)
            #expect(flushed.unreachable == [others[1], others[2]] && !outbox.hasPending)
            var epochs: [UInt32] = []
            for _ in 0..<(Outbox.scannedSlots + 3) {
                for case .heartbeat(let epoch, _) in try received() { epochs.append(epoch) }
            }
            #expect(epochs == Array(0..<UInt32(Batch.maxMessages * (Outbox.scannedSlots + 2) + 1)))
        }
    }

    @Test("turns that gather for one peer, then another, then both reuse their slots: no more than peers in a turn")
    func slotsReused() throws {
        try Self.withPair("outbox-reuse") { router, _ in
            var outbox = Outbox()
            let peers = (0..<3).map { PeerID(Array("nobody-\($0)".utf8)) }
            for turn in 0..<60 {
                // One peer a turn, the same for a few turns, then another; every fifth turn two.
                let peer = peers[(turn / 3) % peers.count]
                _ = try outbox.enqueue(.cancel(Self.id), to: peer, on: router)
                if turn % 5 == 0 { _ = try outbox.enqueue(.cancel(Self.id), to: peers[(turn + 1) % 3], on: router) }
                _ = try outbox.flushPending(on: router)
                #expect(!outbox.hasPending)
            }
            #expect(outbox.slotCount <= 2, "\(outbox.slotCount) slots for at most two peers a turn")
        }
    }

    @Test("the flush hook's request: raised when a message is gathered, and after a flush that holds some back")
    func flushRequest() throws {
        try Self.withPair("outbox-request") { router, _ in
            var outbox = Outbox()
            let request = PollRequest()
            outbox.requestFlushes(with: request)
            let held = PeerID(Array("nobody-held".utf8))
            let other = PeerID(Array("nobody-other".utf8))
            #expect(try outbox.flushPending(on: router).unreachable.isEmpty)
            // The reactor lowers it as it runs the hook (here by hand).
            request.raised = false
            _ = try outbox.enqueue(.cancel(Self.id), to: held, on: router)
            _ = try outbox.enqueue(.cancel(Self.id), to: other, on: router)
            #expect(request.isRaised)
            request.raised = false
            _ = try outbox.flushPending(on: router) { $0 == held }
            // One peer's messages stay gathered: the hook must run again before the next poll.
            #expect(request.isRaised && outbox.hasPending)
            request.raised = false
            _ = try outbox.flushPending(on: router)
            #expect(!request.isRaised && !outbox.hasPending)
        }
    }

    @Test("a large message goes alone, after what was gathered before it")
    func largeMessagesKeepOrder() throws {
        try Self.withPair("outbox-large") { router, dealer in
            var outbox = Outbox()
            let big = WireMessage.progress(
                Self.id,
                attempt: 1,
                payload: [UInt8](repeating: 7, count: Outbox.batchableBytes + 1)
            )
            _ = try outbox.enqueue(WireMessage.heartbeat(epoch: 1).encode(), to: Outbox.direct, on: dealer)
            _ = try outbox.enqueue(WireMessage.heartbeat(epoch: 2).encode(), to: Outbox.direct, on: dealer)
            #expect(try outbox.enqueue(big.encode(), to: Outbox.direct, on: dealer) == .sent)
            _ = try outbox.enqueue(WireMessage.heartbeat(epoch: 3).encode(), to: Outbox.direct, on: dealer)
            _ = try outbox.flushPending(on: dealer)
            #expect(try Self.receive(router) == [.heartbeat(epoch: 1), .heartbeat(epoch: 2)])
            #expect(try Self.receive(router) == [big])
            #expect(try Self.receive(router) == [.heartbeat(epoch: 3)])
        }
    }

    @Test("a full BATCH leaves at once; an unknown peer is reported at the flush and its messages dropped")
    func limitsAndUnknownPeers() throws {
        try Self.withPair("outbox-limits") { router, dealer in
            var outbox = Outbox()
            var outcomes: [Outbox.Outcome] = []
            for epoch in 0..<UInt32(Batch.maxMessages) {
                outcomes.append(
                    try outbox.enqueue(WireMessage.heartbeat(epoch: epoch).encode(), to: Outbox.direct, on: dealer)
                )
            }
            #expect(outcomes.last == .sent)
            #expect(outcomes.dropLast().allSatisfy { $0 == .gathered })
            #expect(!outbox.hasPending)
            #expect(try Self.receive(router).count == Batch.maxMessages)

            // The ROUTER side: "nobody" is not connected.
            var routerOutbox = Outbox()
            let nobody = PeerID(Array("nobody".utf8))
            #expect(try routerOutbox.enqueue(WireMessage.cancel(Self.id).encode(), to: nobody, on: router) == .gathered)
            let flushed = try routerOutbox.flushPending(on: router)
            #expect(flushed.unreachable == [nobody])
            #expect(!routerOutbox.hasPending && routerOutbox.isEmpty)
        }
    }
}
