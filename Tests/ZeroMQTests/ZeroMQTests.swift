import Glibc
import Synchronization
import Testing

@testable import ZeroMQ

/// An actor whose executor is a reactor, as the broker, workers and coordinators are.
/// Whether a timer scheduled from another timer's body fired (set on the reactor, read after).
private final class PastFlag: Sendable {
    private let fired = Mutex(false)
    func set() { self.fired.withLock { $0 = true } }
    var value: Bool { self.fired.withLock { $0 } }
}

/// A PULL bound to `inproc://name` and a PUSH connected to it (its joined sends over `sendBlocks`).
private func inprocPair(
    _ context: ZMQContext,
    _ name: String,
    sendBlocks: SendBlocks = .shared
) throws -> (push: Socket, pull: Socket) {
    let pull = try Socket(context, type: .pull)
    try pull.bind("inproc://\(name)")
    let push = try Socket(context, type: .push, sendBlocks: sendBlocks)
    try push.connect("inproc://\(name)")
    return (push, pull)
}

/// Which hooks ran, in order (appended on the reactor, read after).
private final class HookLog: Sendable {
    private let entries = Mutex<[String]>([])
    func add(_ entry: String) { self.entries.withLock { $0.append(entry) } }
    var all: [String] { self.entries.withLock { $0 } }
}

/// Registers hooks that cancel and add hooks while the reactor runs them.
private actor HookHost {
    let reactor: Reactor
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }
    init(reactor: Reactor) { self.reactor = reactor }

    /// A logs and cancels itself at its second turn; B cancels C (after it in the list) at its first;
    /// D adds E at its first. Every hook is cancelled by `stop`.
    func start(_ log: HookLog) {
        let reactor = self.reactor
        var a: TimerID?
        var c: TimerID?
        var aRuns = 0
        var bRan = false
        var dRan = false
        var added: [TimerID] = []
        a = reactor.beforePoll {
            log.add("A")
            aRuns += 1
            if aRuns == 2, let a { reactor.cancel(a) }
        }
        let b = reactor.beforePoll {
            log.add("B")
            if !bRan, let c { reactor.cancel(c) }
            bRan = true
        }
        c = reactor.beforePoll { log.add("C") }
        let d = reactor.beforePoll {
            log.add("D")
            if !dRan { added.append(reactor.beforePoll { log.add("E") }) }
            dRan = true
        }
        self.stopHooks = { for id in [a, b, c, d].compactMap({ $0 }) + added { reactor.cancel(id) } }
    }

    private var stopHooks: (() -> Void)?
    func poke() {}
    func stop() { self.stopHooks?() }
}

/// A hook with a request (``Reactor/beforePoll(when:_:)``), which logs "R" each time it runs.
private actor RequestHost {
    let reactor: Reactor
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }
    let request = PollRequest()
    private var hook: TimerID?
    init(reactor: Reactor) { self.reactor = reactor }

    func start(_ log: HookLog) { self.hook = self.reactor.beforePoll(when: self.request) { log.add("R") } }
    func raise() { self.request.raise() }
    var isRaised: Bool { self.request.isRaised }
    func poke() {}
    func stop() { if let hook { self.reactor.cancel(hook) } }
}

/// Logs "freed <name>" when it goes: what a handler or a hook captured.
private final class Witness: Sendable {
    let name: String
    let log: HookLog
    init(_ name: String, _ log: HookLog) {
        self.name = name
        self.log = log
    }
    deinit { self.log.add("freed \(self.name)") }
}

/// A socket handler that unregisters its socket, and a hook that cancels itself, each from its own
/// call, and then logs: the reactor calls them without a retain (``Reactor/Callback``), so it must
/// keep what they captured until the call has returned, and no longer.
private actor SelfRemover {
    let reactor: Reactor
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }
    init(reactor: Reactor) { self.reactor = reactor }

    /// Binds a PULL to `inproc://endpoint` whose handler removes itself at the first message.
    func start(_ log: HookLog, endpoint: String) throws {
        let reactor = self.reactor
        let pull = try Socket(reactor.context, type: .pull)
        try pull.bind("inproc://\(endpoint)")
        self.pull = pull
        var handlerWitness: Witness? = Witness("handler", log)
        reactor.register(pull) { [handlerWitness] in
            _ = try? pull.receive()
            reactor.unregister(pull)
            // Its box is kept: a debug build retains what the body captured for the call anyway,
            // a release build does not.
            log.add(reactor.retired.isEmpty ? "not kept" : "unregistered \(handlerWitness?.name ?? "?")")
        }
        handlerWitness = nil
        var hookWitness: Witness? = Witness("hook", log)
        var hook: TimerID?
        hook = reactor.beforePoll { [hookWitness] in
            if let hook { reactor.cancel(hook) }
            log.add(reactor.retired.isEmpty ? "not kept" : "cancelled \(hookWitness?.name ?? "?")")
        }
        hookWitness = nil
    }

    private var pull: Socket?
    func poke() {}
    func close() { self.pull?.close() }
    /// The boxes the reactor still keeps for removed handlers and hooks (none once no body runs).
    func retiredCount() -> Int { self.reactor.retired.count }
}

private actor Echo {
    let reactor: Reactor
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }
    var router: Socket?
    var received: [[[UInt8]]] = []
    var waiters: [CheckedContinuation<Void, Never>] = []

    init(reactor: Reactor) { self.reactor = reactor }

    func onReactorThread() -> Bool { self.reactor.isOnReactorThread }

    func bind() throws -> String {
        let socket = try Socket(self.reactor.context, type: .router)
        try socket.set(.routerMandatory(true))
        try socket.set(.linger(milliseconds: 0))
        try socket.bind("tcp://127.0.0.1:*")
        self.router = socket
        self.reactor.register(socket) { [weak self] in self?.assumeIsolated { $0.drain() } }
        return try socket.lastEndpoint()
    }

    /// Reads with `receiveBatch`, as SkyNet's broker and dealers read, and echoes nothing.
    func readBatches() { self.readsBatches = true }
    private var readsBatches = false

    /// Whether the router skips the receive after a message now (``Socket/quietProbes``).
    func skipsProbe() -> Bool { (self.router?.quietProbes ?? 0) >= Socket.quietBeforeSkipping }

    private func drain() {
        guard let router else { return }
        if self.readsBatches {
            _ = try? router.receiveBatch { self.received.append($0.allBytes()) }
            return
        }
        while let message = try? router.receive() {
            let frames = message.allBytes()
            self.received.append(frames)
            // Echo everything after the routing id back to the sender.
            _ = try? router.send(frames)
        }
        for waiter in self.waiters { waiter.resume() }
        self.waiters.removeAll()
    }

    func waitForMessages(_ count: Int) async {
        while self.received.count < count {
            await withCheckedContinuation { self.waiters.append($0) }
        }
    }

    func sendTo(_ peer: [UInt8], _ payload: [UInt8]) throws -> SendStatus {
        try self.router!.send([peer, payload])
    }

    /// Holds the reactor thread (no poll) until `arrived` says a message is on its way in and `hold`
    /// has passed, then sends to `peer`: the send takes in the commands queued for the socket, the
    /// arrival's among them, and with them the signal of the socket's `ZMQ_FD`.
    func holdThenSend(to peer: [UInt8], _ flags: HoldFlags, hold: Duration) throws -> SendStatus {
        flags.started.store(true, ordering: .releasing)
        let start = ContinuousClock.now
        while !flags.arrived.load(ordering: .acquiring) || ContinuousClock.now - start < hold { usleep(1000) }
        return try self.router!.send([peer, [9]])
    }

    func close() {
        if let router {
            self.reactor.unregister(router)
            router.close()
        }
    }

    /// Schedules one-shot timers at 30, 10 and 20 ms and a periodic one every 15 ms, cancels the 10 ms
    /// one (the earliest), and reports what fired, in order, by 100 ms.
    func timerOrder() async -> [String] {
        var fired: [String] = []
        let clock = ContinuousClock()
        let start = clock.now
        self.reactor.schedule(after: .milliseconds(30)) { fired.append("30") }
        let early = self.reactor.schedule(after: .milliseconds(10)) { fired.append("10") }
        self.reactor.schedule(after: .milliseconds(20)) { fired.append("20") }
        let periodic = self.reactor.schedule(after: .milliseconds(15), every: .milliseconds(15)) {
            fired.append("p\((clock.now - start) / .milliseconds(1) >= 15 ? "" : " early")")
        }
        self.reactor.cancel(early)
        await withCheckedContinuation { continuation in
            self.reactor.schedule(after: .milliseconds(100)) { continuation.resume() }
        }
        self.reactor.cancel(periodic)
        return fired
    }

    /// A kept timer (``Reactor/makeTimer(_:)``) through its life, as `[(step, fired so far)]`: made
    /// (disarmed), armed twice (the second keeps the first's instant), fired once, re-armed and fired
    /// again, disarmed before its time, disarmed while another timer comes later (which still
    /// fires), armed anew to a later instant (it fires then, once), and cancelled (arming it then
    /// does nothing).
    func keptTimer() async -> [(String, Int)] {
        var fired = 0
        var steps: [(String, Int)] = []
        let timer = self.reactor.makeTimer { fired += 1 }
        func wait(_ milliseconds: Int) async {
            await withCheckedContinuation { continuation in
                self.reactor.schedule(after: .milliseconds(milliseconds)) { continuation.resume() }
            }
        }
        await wait(30)
        steps.append(("made", fired))
        self.reactor.arm(timer, after: .milliseconds(10))
        self.reactor.arm(timer, after: .seconds(5))
        await wait(60)
        steps.append(("armed twice", fired))
        await wait(30)
        steps.append(("after firing", fired))
        self.reactor.arm(timer, after: .milliseconds(5))
        await wait(40)
        steps.append(("re-armed", fired))
        self.reactor.arm(timer, after: .milliseconds(20))
        self.reactor.disarm(timer)
        await wait(50)
        steps.append(("disarmed", fired))
        var other = false
        self.reactor.arm(timer, after: .milliseconds(5))
        self.reactor.schedule(after: .milliseconds(15)) { other = true }
        self.reactor.disarm(timer)
        await wait(50)
        steps.append(("other fired", other ? fired : -1))
        // Armed anew (``Reactor/rearm(_:after:)``): an armed timer's instant moves later, where it
        // fires once.
        self.reactor.arm(timer, after: .milliseconds(10))
        self.reactor.rearm(timer, after: .milliseconds(250))
        await wait(60)
        steps.append(("moved later", fired))
        await wait(300)
        steps.append(("fired where moved", fired))
        self.reactor.cancel(timer)
        self.reactor.arm(timer, after: .milliseconds(1))
        await wait(30)
        steps.append(("cancelled", fired))
        return steps
    }

    /// Timers whose instants lie past the reactor's clock (a delay of millennia, a period as long, a
    /// kept timer armed so far off, and the largest `Duration`) beside a 10 ms one and one with the
    /// most negative `Duration` (due at once): returns whether the 10 ms one and the negative one
    /// fired and how many of the others did by 60 ms (the far ones are then cancelled).
    func farTimers() async -> (near: Bool, past: Bool, far: Int) {
        var near = false
        var past = false
        var far = 0
        let millennia = Duration.seconds(Int64(1) << 40)
        let ids = [
            self.reactor.schedule(after: millennia) { far += 1 },
            self.reactor.schedule(after: millennia, every: millennia) { far += 1 },
            self.reactor.schedule(after: .seconds(Int64.max)) { far += 1 },
            self.reactor.makeTimer { far += 1 },
        ]
        self.reactor.arm(ids[3], after: millennia)
        self.reactor.schedule(after: .milliseconds(10)) { near = true }
        // Scheduled from a timer's body, which runs after the turn's timers were looked at: the
        // reactor then waits (polling, with idle spin) while it is armed, before firing it.
        let pastFired = PastFlag()
        self.reactor.schedule(after: .milliseconds(1)) {
            self.reactor.schedule(after: .seconds(Int64.min)) { pastFired.set() }
        }
        await withCheckedContinuation { continuation in
            self.reactor.schedule(after: .milliseconds(60)) { continuation.resume() }
        }
        for id in ids { self.reactor.cancel(id) }
        past = pastFired.value
        return (near, past, far)
    }

    /// The reactor's window, its wake-ups caught while polling, and its thread's CPU time so far.
    func polling() -> (window: Duration, polledWakeups: Int, cpu: Duration) {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        let cpu = Duration.seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
        return (self.reactor.spinWindow, self.reactor.polledWakeups, cpu)
    }

    func timer(after: Duration) async -> Duration {
        let start = ContinuousClock.now
        await withCheckedContinuation { continuation in
            self.reactor.schedule(after: after) { continuation.resume() }
        }
        return ContinuousClock.now - start
    }
}

/// What a test thread and a reactor tell each other in `holdThenSend`.
private final class HoldFlags: Sendable {
    let started = Atomic(false)
    let arrived = Atomic(false)
}

/// A DEALER without linger (with `id` as its routing id, when given), connected to `endpoint`.
private func connectedDealer(_ context: ZMQContext, to endpoint: String, id: String? = nil) throws -> Socket {
    let dealer = try Socket(context, type: .dealer)
    if let id { try dealer.set(.routingID(Array(id.utf8))) }
    try dealer.set(.linger(milliseconds: 0))
    try dealer.connect(endpoint)
    return dealer
}

/// Runs `body` with a fresh context and reactor, and shuts both down after it, also when it throws.
private func withReactor(_ body: (Reactor) async throws -> Void) async throws {
    let context = try ZMQContext()
    let reactor = try Reactor(context: context)
    defer {
        reactor.shutdown()
        context.terminate()
    }
    try await body(reactor)
}

@Suite("ZeroMQ module")
struct ZeroMQTests {
    @Test("libzmq is 4.x with CURVE")
    func libraryCapabilities() {
        #expect(ZMQContext.libraryVersion.hasPrefix("4."))
        #expect(ZMQContext.has("curve"))
    }

    @Test("actor jobs run on the reactor thread")
    func actorRunsOnReactor() async throws {
        try await withReactor { reactor in
            let echo = Echo(reactor: reactor)
            #expect(await echo.onReactorThread())
            #expect(!reactor.isOnReactorThread)
        }
    }

    @Test("a DEALER and a reactor-owned ROUTER exchange multipart messages over TCP")
    func dealerRouterRoundTrip() async throws {
        try await withReactor { reactor in
            let echo = Echo(reactor: reactor)
            let endpoint = try await echo.bind()
            #expect(endpoint.hasPrefix("tcp://127.0.0.1:"))
            #expect(!endpoint.hasSuffix(":*"))

            let dealer = try connectedDealer(reactor.context, to: endpoint, id: "d-1")
            let big = [UInt8](repeating: 7, count: 100_000)  // larger than any fixed receive buffer
            #expect(try dealer.send([[1, 2, 3], [], big]) == .sent)
            await echo.waitForMessages(1)
            let received = await echo.received
            #expect(received.first == [Array("d-1".utf8), [1, 2, 3], [], big])

            let reply = try dealer.receiveBlocking()
            let frames = reply.allBytes()
            #expect(frames == [[1, 2, 3], [], big])
            dealer.close()
            await echo.close()
        }
    }

    @Test("a message whose signal a send took in is still handled (ZMQ_FD is edge-triggered)")
    func sendTakesInTheSignal() async throws {
        // The reactor polls the sockets' ZMQ_FDs itself and asks ZMQ_EVENTS only of sockets that a
        // libzmq call may have changed. Here the only thing that could wake it for the second message
        // is that rule: the descriptor's signal went with the send's commands.
        try await withReactor { reactor in
            let echo = Echo(reactor: reactor)
            let endpoint = try await echo.bind()
            let dealer = try connectedDealer(reactor.context, to: endpoint, id: "d-2")
            #expect(try dealer.send([[1]]) == .sent)
            await echo.waitForMessages(1)
            _ = try dealer.receiveBlocking()

            let flags = HoldFlags()
            // 20 ms: past libzmq's throttle of a send's command processing (about a millisecond).
            async let held = echo.holdThenSend(to: Array("d-2".utf8), flags, hold: .milliseconds(20))
            while !flags.started.load(ordering: .acquiring) { usleep(1000) }
            #expect(try dealer.send([[2]]) == .sent)
            flags.arrived.store(true, ordering: .releasing)
            #expect(try await held == .sent)
            let deadline = ContinuousClock.now + .seconds(5)
            while await echo.received.count < 2, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(await echo.received.count == 2, "the second message was never handled")
            dealer.close()
            await echo.close()
        }
    }

    @Test(
        "a quiet socket a reactor watches is not probed after its first message; the next message waiting is still read"
    )
    func quietSocketSkipsProbe() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let router = try Socket(context, type: .router)
        try router.set(.linger(milliseconds: 0))
        try router.bind("tcp://127.0.0.1:*")
        let dealer = try connectedDealer(context, to: try router.lastEndpoint(), id: "q")
        defer {
            dealer.close()
            router.close()
        }
        /// Receives until a batch read something; returns its size.
        func batch() throws -> Int {
            let deadline = ContinuousClock.now + .seconds(5)
            while ContinuousClock.now < deadline {
                let count = try router.receiveBatch { _ in }
                if count > 0 { return count }
                usleep(1000)
            }
            return 0
        }
        for watched in [false, true] {
            router.watchedByReactor = watched
            // One message at a time: each batch's receive after it finds nothing, until the socket
            // counts as quiet.
            for index in 0..<Int(Socket.quietBeforeSkipping) {
                #expect(try dealer.send([[UInt8(index)]]) == .sent)
                #expect(try batch() == 1)
            }
            #expect(router.quietProbes == Socket.quietBeforeSkipping)
            // Two waiting: a socket no reactor watches is drained as always; a watched one stops
            // after the first, and leaves the question to the reactor.
            #expect(try dealer.send([[1]]) == .sent && dealer.send([[2]]) == .sent)
            usleep(50_000)
            if !watched {
                #expect(try batch() == 2)
                continue
            }
            #expect(try batch() == 1)
            #expect(router.readiness == .unknown, "left for the reactor to ask")
            #expect(try router.messageWaiting(), "the second is waiting")
            #expect(router.quietProbes == 0, "found busy: drained to the end again")
            #expect(try batch() == 1)
            #expect(router.readiness == .drained)
        }
    }

    @Test("through a reactor: single messages, then a burst after the socket turned quiet, all handled")
    func quietSocketBurstThroughReactor() async throws {
        try await withReactor { reactor in
            let sink = Echo(reactor: reactor)
            await sink.readBatches()
            let endpoint = try await sink.bind()
            let dealer = try connectedDealer(reactor.context, to: endpoint, id: "b")
            defer { dealer.close() }
            func waitFor(_ count: Int) async throws {
                let deadline = ContinuousClock.now + .seconds(5)
                while await sink.received.count < count, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(1))
                }
            }
            let singles = Int(Socket.quietBeforeSkipping) + 4
            for index in 0..<singles {
                #expect(try dealer.send([[UInt8(index)]]) == .sent)
                try await waitFor(index + 1)
            }
            #expect(await sink.skipsProbe())
            // A burst: the handler takes one message a call now; the reactor's question finds the
            // rest, turn after turn, and none waits for a later message to be read.
            for index in 0..<20 { #expect(try dealer.send([[UInt8(index)]]) == .sent) }
            try await waitFor(singles + 20)
            #expect(await sink.received.count == singles + 20, "a message of the burst was never read")
            await sink.close()
        }
    }

    @Test("ROUTER_MANDATORY reports an unknown peer instead of dropping silently")
    func routerMandatoryUnreachable() async throws {
        try await withReactor { reactor in
            let echo = Echo(reactor: reactor)
            _ = try await echo.bind()
            #expect(try await echo.sendTo(Array("nobody".utf8), [1]) == .hostUnreachable)
            await echo.close()
        }
    }

    @Test("a receive keeps at most frameLimit frames and says it overflowed")
    func frameLimit() throws {
        let context = try ZMQContext()
        let pull = try Socket(context, type: .pull)
        pull.frameLimit = 4
        try pull.bind("inproc://limit")
        let push = try Socket(context, type: .push)
        try push.connect("inproc://limit")
        #expect(try push.send((0..<10).map { [UInt8($0)] }) == .sent)
        #expect(try push.send([[42]]) == .sent)
        let first = try pull.receiveBlocking()
        let (firstCount, firstOverflowed, lastKept) = (first.count, first.overflowed, first.bytes(of: 3))
        #expect(firstCount == 4)
        #expect(firstOverflowed)
        #expect(lastKept == [3])
        let second = try pull.receiveBlocking()  // the next message is intact
        let (secondCount, secondOverflowed, secondBytes) = (second.count, second.overflowed, second.bytes(of: 0))
        #expect(secondCount == 1 && !secondOverflowed && secondBytes == [42])
        // The same without waiting (its first frame is received on the stack and moved into the
        // message): a small first frame's bytes live inside its `zmq_msg_t`, a large one's apart.
        let large = [UInt8](repeating: 7, count: 100)
        #expect(try pull.receive() == nil)
        #expect(try push.send([[1]] + (2..<10).map { [UInt8($0)] }) == .sent)
        #expect(try push.send([large, [2]]) == .sent)
        let idle = try Socket(context, type: .pull)
        try idle.bind("inproc://limit-idle")
        var views: [(Int, Bool, [[UInt8]])] = []
        while views.count < 2 {
            if let message = try pull.receive() {
                // Read after another receive has used the same stack (one that finds nothing).
                #expect(try idle.receive() == nil)
                views.append((message.count, message.overflowed, message.allBytes()))
            } else {
                usleep(1_000)
            }
        }
        #expect(views[0].0 == 4 && views[0].1 && views[0].2 == [[1], [2], [3], [4]])
        #expect(views[1].0 == 2 && !views[1].1 && views[1].2 == [large, [2]])
        #expect(try pull.receive() == nil)
        idle.close()
        push.close()
        pull.close()
        context.terminate()
    }

    @Test("a joined send copies a small message into a kept block, a larger one not; the block comes back")
    func joinedSendBlocks() throws {
        let context = try ZMQContext()
        let blocks = SendBlocks(blockSize: 64, keptBlocks: 2)
        let (push, pull) = try inprocPair(context, "blocks", sendBlocks: blocks)
        // Sizes under, at and over the block size, each head and body distinct bytes.
        for size in [1, 33, 34, 63, 64, 65, 300] {
            let head = (0..<min(size, 5)).map { UInt8($0) }
            let body = (0..<(size - head.count)).map { UInt8(truncatingIfNeeded: 100 + $0) }
            let status = try head.withUnsafeBytes { head in
                try body.withUnsafeBytes { body in try push.send(routing: nil, joining: head, body) }
            }
            #expect(status == .sent)
            let received = try pull.receiveBlocking().allBytes()
            #expect(received == [head + body], "size \(size)")
        }
        // Over inproc the receiver holds the sender's content: each block came back when its
        // message was dropped, and the pool keeps one (it hands the same block out again).
        #expect(blocks.spareCount == 1)

        // A send that queues nothing (a DEALER with no peer: EAGAIN) gives its block back at once.
        let dealer = try Socket(context, type: .dealer, sendBlocks: blocks)
        let byte: [UInt8] = [7]
        let status = try byte.withUnsafeBytes { head in
            try byte.withUnsafeBytes { body in try dealer.send(routing: nil, joining: head, body) }
        }
        #expect(status == .wouldBlock)
        #expect(blocks.spareCount == 1)

        // Blocks given back beyond the pool's size are freed, not kept.
        let taken = (0..<5).map { _ in blocks.take() }
        #expect(blocks.spareCount == 0)
        for block in taken { blocks.give(block) }
        #expect(blocks.spareCount == 2)
        dealer.close()
        push.close()
        pull.close()
        context.terminate()
    }

    @Test("a received frame's bytes are read as received; forwarded on, its view is empty; not forwarded, intact")
    func frameViews() throws {
        let context = try ZMQContext()
        let (push, pull) = try inprocPair(context, "views")
        let big = [UInt8](repeating: 0x5A, count: 64)  // past libzmq's inline 33 bytes
        #expect(try push.send([[1, 2, 3], [], big, Array("tail".utf8)]) == .sent)
        var message = try pull.receiveBlocking()
        #expect(message.count == 4)
        #expect(message.allBytes() == [[1, 2, 3], [], big, Array("tail".utf8)])
        #expect((0..<4).map { message.size(of: $0) } == [3, 0, 64, 4])
        // Nothing queued (a DEALER without a peer): the message is as it was.
        let nowhere = try Socket(context, type: .dealer)
        #expect(try nowhere.send(prefix: [], forwarding: &message, from: 2) == .wouldBlock)
        #expect(message.allBytes() == [[1, 2, 3], [], big, Array("tail".utf8)])
        // Forwarded: the frames sent on are libzmq's, and read as empty here; the others are intact.
        let (forward, out) = try inprocPair(context, "views-out")
        #expect(try forward.send(prefix: [[9]], forwarding: &message, from: 2) == .sent)
        #expect(message.allBytes() == [[1, 2, 3], [], [], []])
        #expect(message.size(of: 2) == 0 && message.size(of: 3) == 0)
        #expect(try out.receiveBlocking().allBytes() == [[9], big, Array("tail".utf8)])
        for socket in [pull, push, nowhere, out, forward] { socket.close() }
        context.terminate()
    }

    @Test("messages over kept blocks outlive their socket, their context and every other reference to the pool")
    func sendBlocksOutliveSocket() throws {
        let context = try ZMQContext()
        weak var weakBlocks: SendBlocks?
        let pull: Socket
        do {
            let blocks = SendBlocks(blockSize: 64, keptBlocks: 4)
            weakBlocks = blocks
            let push: Socket
            (push, pull) = try inprocPair(context, "outlive", sendBlocks: blocks)
            let payload = Array("still here".utf8)
            for _ in 0..<3 {
                let status = try payload.withUnsafeBytes { head in
                    try [UInt8]().withUnsafeBytes { body in try push.send(routing: nil, joining: head, body) }
                }
                #expect(status == .sent)
            }
            push.close()
        }
        // The three messages still hold the pool; it goes when the last of them is dropped.
        #expect(weakBlocks != nil)
        for _ in 0..<3 { #expect(try pull.receiveBlocking().allBytes() == [Array("still here".utf8)]) }
        #expect(weakBlocks == nil)
        pull.close()
        context.terminate()
    }

    @Test("hooks before the poll run once a turn in order, while they cancel and add hooks")
    func beforePollHooks() async throws {
        try await withReactor { reactor in
            let host = HookHost(reactor: reactor)
            let log = HookLog()
            await host.start(log)
            for _ in 0..<4 {
                try await Task.sleep(for: .milliseconds(5))
                await host.poke()  // a job: another turn
            }
            await host.stop()
            let entries = log.all
            // The first turn: C was cancelled by B before its turn, E added by D runs at once; the
            // second: A's last; then B, D and E, every turn, in that order.
            #expect(Array(entries.prefix(8)) == ["A", "B", "D", "E", "A", "B", "D", "E"], "\(entries)")
            let rest = Array(entries.dropFirst(8))
            #expect(rest.count >= 6 && rest.count % 3 == 0, "\(entries)")
            #expect(rest == (0..<(rest.count / 3)).flatMap { _ in ["B", "D", "E"] }, "\(entries)")
        }
    }

    @Test("a hook with a request runs only before the polls its request was raised for")
    func requestedHook() async throws {
        try await withReactor { reactor in
            let host = RequestHost(reactor: reactor)
            let log = HookLog()
            await host.start(log)  // raised as it is added: it runs before the next poll
            for _ in 0..<3 {
                try await Task.sleep(for: .milliseconds(5))
                await host.poke()  // a job: another turn
            }
            #expect(log.all == ["R"])
            #expect(await !host.isRaised)
            await host.raise()
            for _ in 0..<3 {
                try await Task.sleep(for: .milliseconds(5))
                await host.poke()
            }
            #expect(log.all == ["R", "R"])
            await host.stop()
        }
    }

    @Test("a handler or a hook that removes itself keeps what it captured until its call returns")
    func selfRemovingCallbacks() async throws {
        try await withReactor { reactor in
            let host = SelfRemover(reactor: reactor)
            let log = HookLog()
            try await host.start(log, endpoint: "self-remover")
            let push = try Socket(reactor.context, type: .push)
            try push.connect("inproc://self-remover")
            #expect(try push.send([[1]]) == .sent)
            for _ in 0..<20 where log.all.count < 4 {
                try await Task.sleep(for: .milliseconds(5))
                await host.poke()  // a job: another turn
            }
            let entries = log.all
            // Each one's captures go after its call, at a later turn, never during it.
            for name in ["handler", "hook"] {
                let done = entries.firstIndex { $0.hasSuffix(" \(name)") && !$0.hasPrefix("freed") }
                let freed = entries.firstIndex(of: "freed \(name)")
                #expect(done != nil && freed != nil && done! < freed!, "\(entries)")
            }
            #expect(!entries.contains { $0.hasSuffix("?") || $0 == "not kept" }, "\(entries)")
            #expect(await host.retiredCount() == 0, "kept past the call")
            push.close()
            await host.close()
        }
    }

    @Test("errors carry the errno text and the operation")
    func errorsAreValues() throws {
        let context = try ZMQContext()
        let socket = try Socket(context, type: .router)
        #expect(throws: ZMQError.self) { try socket.bind("tcp://not-an-endpoint") }
        do {
            try socket.bind("bogus://x")
            Issue.record("bind should fail")
        } catch {
            #expect(error.description.contains("bind bogus://x"))
            #expect(!error.message.isEmpty)
        }
        try socket.set(.maxMessageSize(1 << 40))  // an int64 option takes a 64-bit value
        socket.close()
        context.terminate()
    }

    @Test("under steady traffic the reactor polls between messages; idle, it sleeps and uses no CPU")
    func idleSpin() async throws {
        try await withReactor { reactor in
            let echo = Echo(reactor: reactor)
            let endpoint = try await echo.bind()
            let dealer = try connectedDealer(reactor.context, to: endpoint)
            // One message at a time: each next one comes a few tens of microseconds after the echo.
            for index in 0..<500 {
                #expect(try dealer.send([[UInt8(index & 0xFF)]]) == .sent)
                _ = try dealer.receiveBlocking()
            }
            let busy = await echo.polling()
            #expect(busy.polledWakeups > 0, "no message was caught while polling")
            try await Task.sleep(for: .milliseconds(500))
            let idle = await echo.polling()
            // Polling all the time would have used most of the 500 ms.
            #expect(idle.cpu - busy.cpu < .milliseconds(50), "\(idle.cpu - busy.cpu) of CPU while idle")
            #expect(idle.window < IdleSpin.defaultLimit)
            dealer.close()
            await echo.close()
        }
    }

    @Test("the idle-spin window grows while events come soon, shrinks to zero when idle, never past its limit")
    func idleSpinPolicy() {
        var spin = IdleSpin()
        #expect(spin.window == .zero)
        spin.waited(.microseconds(120))  // would have been caught by a window: start one
        #expect(spin.window == IdleSpin.growStart)
        spin.waited(.microseconds(30))  // caught while polling: the window stays
        #expect(spin.window == .microseconds(50))
        spin.waited(.microseconds(80))
        #expect(spin.window == .microseconds(100))
        spin.waited(.microseconds(150))
        spin.waited(.microseconds(190))
        #expect(spin.window == .microseconds(200))  // doubled, but not past the limit
        spin.waited(.seconds(1))  // idle: halve
        #expect(spin.window == .microseconds(100))
        spin.waited(.milliseconds(5))
        #expect(spin.window == .microseconds(50))
        spin.waited(.milliseconds(5))
        #expect(spin.window == .zero)  // below growStart: no polling at all

        var off = IdleSpin(limit: .zero)
        off.waited(.microseconds(10))
        #expect(off.window == .zero)
        #expect(IdleSpin(limit: .microseconds(-5)).limit == .zero)

        var small = IdleSpin(limit: .microseconds(20))  // a limit below growStart is still the limit
        small.waited(.microseconds(15))
        #expect(small.window == .microseconds(20))
        small.waited(.milliseconds(1))
        #expect(small.window == .zero)
    }

    @Test("timers fire on the reactor after their delay")
    func timers() async throws {
        try await withReactor { reactor in
            let echo = Echo(reactor: reactor)
            let waited = await echo.timer(after: .milliseconds(50))
            #expect(waited >= .milliseconds(49))
        }
    }

    @Test("a timer under a millisecond fires on time, not at the poll's next whole millisecond")
    func subMillisecondTimers() async throws {
        // No polling between events (idle spin off): only the timerfd can wake the poll early.
        let context = try ZMQContext()
        let reactor = try Reactor(context: context, idleSpin: .zero)
        defer {
            reactor.shutdown()
            context.terminate()
        }
        let echo = Echo(reactor: reactor)
        var waits: [Duration] = []
        for _ in 0..<21 { waits.append(await echo.timer(after: .microseconds(250))) }
        waits.sort()
        // A 250 µs timer polled for in whole milliseconds took at least 1 ms every time, so a quarter
        // of them well under a millisecond shows the timerfd at work. (The median, bound at 800 µs,
        // reached 806 µs once in CI with the other suites running beside it: a bound on the typical
        // wait is a benchmark's business, not a test's.)
        #expect(waits[0] >= .microseconds(250), "no timer fires early: \(waits[0])")
        #expect(waits[5] < .microseconds(900), "the 6th shortest of 21 waits: \(waits[5]), all: \(waits)")
    }

    @Test("timers fire in due order; a cancelled one never fires; a periodic one repeats until cancelled")
    func timerOrder() async throws {
        try await withReactor { reactor in
            let fired = await Echo(reactor: reactor).timerOrder()
            #expect(fired.filter { !$0.hasPrefix("p") } == ["20", "30"], "\(fired)")
            #expect(fired.filter { $0.hasPrefix("p") }.count >= 3, "\(fired)")
            #expect(!fired.contains("p early"), "\(fired)")
            #expect(fired.firstIndex(of: "20")! < fired.firstIndex(of: "30")!)
        }
    }

    @Test(
        "a timer past the clock's range (millennia, the largest Duration) waits, a negative delay fires at once; others still fire"
    )
    func farTimers() async throws {
        // With and without polling: the reactor's instants are nanoseconds in an Int64, and a delay
        // past them saturates rather than overflows.
        for idleSpin in [Duration.zero, IdleSpin.defaultLimit] {
            try await withReactor(idleSpin: idleSpin) { reactor in
                let (near, past, far) = await Echo(reactor: reactor).farTimers()
                #expect(near, "the 10 ms timer did not fire (idle spin \(idleSpin))")
                #expect(past, "the timer with a negative delay did not fire (idle spin \(idleSpin))")
                #expect(far == 0, "\(far) far timers fired (idle spin \(idleSpin))")
            }
        }
    }

    @Test("a Duration in nanoseconds: truncated toward zero, clamped to Int64")
    func clampedNanoseconds() {
        #expect(Duration.zero.clampedNanoseconds == 0)
        #expect(Duration.microseconds(80).clampedNanoseconds == 80_000)
        #expect((Duration.seconds(3) + .nanoseconds(7)).clampedNanoseconds == 3_000_000_007)
        #expect(Duration.nanoseconds(-5).clampedNanoseconds == -5)
        #expect((Duration.nanoseconds(1) / 3).clampedNanoseconds == 0)
        #expect(Duration.seconds(Int64.max).clampedNanoseconds == .max)
        #expect(Duration.seconds(Int64.min).clampedNanoseconds == .min)
        #expect(Duration.seconds(9_223_372_036).clampedNanoseconds == 9_223_372_036_000_000_000)
        #expect(Duration.seconds(9_223_372_037).clampedNanoseconds == .max)
    }

    @Test("a kept timer: armed once however often armed, moved when rearmed, disarmed by firing, gone when cancelled")
    func keptTimer() async throws {
        try await withReactor { reactor in
            let steps = await Echo(reactor: reactor).keptTimer()
            #expect(
                steps.map(\.0) == [
                    "made", "armed twice", "after firing", "re-armed", "disarmed", "other fired", "moved later",
                    "fired where moved", "cancelled",
                ]
            )
            #expect(steps.map(\.1) == [0, 1, 1, 2, 2, 2, 2, 3, 3], "\(steps)")
        }
    }

    @Test("a task that prefers the reactor calls an actor on it inline, not through the job queue")
    func preferredTaskCallsInline() async throws {
        try await withReactor { reactor in
            let counter = ReactorCounter(reactor)
            // A loop isolated to the actor (a client loop calling `Coordinator.run`): every call and
            // return inline. Run as the serial executor alone, each call and each return was a job of
            // its own (~400).
            let isolated = await Task(executorPreference: reactor) { await bumps(counter, 200) }.value
            #expect(isolated < 10, "\(isolated) reactor jobs for 200 calls from the actor")
            // From nonisolated code the call is inline and the return a job (a custom executor cannot
            // be taken over on the way back); it was two jobs.
            let nonisolated = await Task(executorPreference: reactor) { () async -> Int in
                let before = await counter.jobsRun()
                for _ in 0..<200 { await counter.bump() }
                return await counter.jobsRun() - before
            }.value
            #expect(nonisolated < 220, "\(nonisolated) reactor jobs for 200 calls from nonisolated code")
            #expect(await counter.count == 400)
        }
    }

    @Test("a scan can sleep on the reactor's timers: on time, on the reactor, and cancellable at once")
    func reactorSleep() async throws {
        try await withReactor { reactor in
            let clock = ContinuousClock()
            let slept = try await Task(executorPreference: reactor) { () async throws -> (Duration, Bool) in
                let start = clock.now
                try await reactor.sleep(for: .milliseconds(50))
                return (clock.now - start, reactor.isOnReactorThread)
            }.value
            #expect(slept.0 >= .milliseconds(50) && slept.0 < .seconds(2))
            #expect(slept.1, "it wakes on the reactor thread")

            let start = clock.now
            let sleeper = Task(executorPreference: reactor) { try await reactor.sleep(for: .seconds(30)) }
            try await Task.sleep(for: .milliseconds(20))
            sleeper.cancel()
            await #expect(throws: CancellationError.self) { try await sleeper.value }
            #expect(clock.now - start < .seconds(5), "cancellation ends it at once")

            // Off the reactor it is a plain Task.sleep.
            let plain = clock.now
            try await Task.detached { try await reactor.sleep(for: .milliseconds(10)) }.value
            #expect(clock.now - plain >= .milliseconds(10))
        }
    }
}

/// CURVE without a ZAP handler (security.md §1.4): the broker's safety rests on libzmq refusing
/// every handshake when the domain is enforced and no handler is bound. If a libzmq upgrade opens
/// that door, this fails.
@Suite("CURVE and ZAP in libzmq")
struct CurveTests {
    /// Messages a ROUTER (CURVE server, ZAP domain set, no handler) receives in `window` from a
    /// DEALER that knows its public key.
    func delivered(enforce: Bool, window: Duration) async throws -> Int {
        let context = try ZMQContext()
        defer { context.terminate() }
        let (serverPublic, serverSecret) = try Curve.keyPair()
        let (clientPublic, clientSecret) = try Curve.keyPair()
        let router = try Socket(context, type: .router)
        try router.set(.linger(milliseconds: 0))
        try router.set(.curveServer(secretKey: serverSecret))
        try router.set(.zapDomain("skynet.test"))
        try router.set(.zapEnforceDomain(enforce))
        try router.bind("tcp://127.0.0.1:*")
        let dealer = try Socket(context, type: .dealer)
        try dealer.set(.linger(milliseconds: 0))
        try dealer.set(.curveClient(serverKey: serverPublic, publicKey: clientPublic, secretKey: clientSecret))
        try dealer.connect(try router.lastEndpoint())
        _ = try dealer.send([[1, 2, 3]])
        var count = 0
        let deadline = ContinuousClock.now + window
        while ContinuousClock.now < deadline, count == 0 {
            while try router.receive() != nil { count += 1 }
            try await Task.sleep(for: .milliseconds(20))
        }
        dealer.close()
        router.close()
        return count
    }

    @Test("with the ZAP domain enforced and no handler bound, no client gets in (fail closed)")
    func failsClosed() async throws {
        // Without enforcement libzmq 4.3.4 lets in any client that knows the server's public key
        // when no handler is bound: the open door the option closes (and proof this test can fail).
        #expect(try await self.delivered(enforce: false, window: .seconds(5)) == 1)
        #expect(try await self.delivered(enforce: true, window: .milliseconds(1500)) == 0)
    }

    @Test("a monitor reports a handshake refused for a mechanism mismatch")
    func monitorEvents() async throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let (_, serverSecret) = try Curve.keyPair()
        let router = try Socket(context, type: .router)
        try router.set(.linger(milliseconds: 0))
        try router.set(.curveServer(secretKey: serverSecret))
        try router.bind("tcp://127.0.0.1:*")
        let dealer = try Socket(context, type: .dealer)
        try dealer.set(.linger(milliseconds: 0))
        let monitor = try dealer.monitor(name: "test")
        try dealer.connect(try router.lastEndpoint())
        var events: [SocketEvent] = []
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline, !events.contains(where: { $0.kind == .handshakeFailedProtocol }) {
            while let message = try monitor.receive() {
                if let event = SocketEvent.decode(message) { events.append(event) }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        dealer.stopMonitoring()
        monitor.close()
        dealer.close()
        router.close()
        let failure = events.first { $0.kind == .handshakeFailedProtocol }
        #expect(failure?.value == SocketEvent.mechanismMismatch, "\(events)")
    }
}

/// `count` calls of `counter.bump()` from a loop isolated to it; the reactor jobs they took.
private func bumps(_ counter: isolated ReactorCounter, _ count: Int) async -> Int {
    let before = counter.jobsRun()
    for _ in 0..<count { await counter.bump() }
    return counter.jobsRun() - before
}

/// An actor on a reactor, for counting the jobs its callers cost.
private actor ReactorCounter {
    let reactor: Reactor
    private(set) var count = 0
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }
    init(_ reactor: Reactor) { self.reactor = reactor }
    func bump() async { self.count += 1 }
    func jobsRun() -> Int { self.reactor.jobsRun }
}
