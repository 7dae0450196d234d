import CZMQ

/// The kind of a ZeroMQ socket.
public enum SocketType: Sendable {
    case router, dealer, req, rep, pair, push, pull, pub, sub

    var raw: Int32 {
        switch self {
        case .router: ZMQ_ROUTER
        case .dealer: ZMQ_DEALER
        case .req: ZMQ_REQ
        case .rep: ZMQ_REP
        case .pair: ZMQ_PAIR
        case .push: ZMQ_PUSH
        case .pull: ZMQ_PULL
        case .pub: ZMQ_PUB
        case .sub: ZMQ_SUB
        }
    }
}

/// What became of a non-blocking send.
public enum SendStatus: Sendable, Equatable {
    /// The whole message was queued.
    case sent
    /// Nothing was queued: the peer is at its high-water mark, or (with `IMMEDIATE`) not connected.
    case wouldBlock
    /// Nothing was queued: a ROUTER with `ROUTER_MANDATORY` has no such peer (it went away).
    case hostUnreachable
}

/// A ZeroMQ socket, owned by one thread.
///
/// Not `Sendable`: libzmq sockets must be used by one thread at a time. In SkyNet every socket belongs
/// to an actor whose executor is a ``Reactor``, so it is only ever touched on that reactor's thread.
/// Sends never block: every send uses `ZMQ_DONTWAIT` and reports ``SendStatus``.
public final class Socket {
    /// The socket's type.
    public let type: SocketType
    let context: ZMQContext  // keeps the context alive while the socket is open
    #if DEBUG
    private(set) var handle: UnsafeMutableRawPointer?
    #else
    // Unchecked in release builds: a plain pointer, read for every send and receive, written once by
    // `close()` (see docs/DESIGN.md §3, "Unchecked exclusivity").
    @exclusivity(unchecked) private(set) var handle: UnsafeMutableRawPointer?
    #endif
    /// The maximum number of frames a receive keeps (see ``Multipart``).
    #if DEBUG
    public var frameLimit: Int = 16
    #else
    // Unchecked in release builds: read by every receive (a dynamic exclusivity check, ~60
    // instructions), written by the socket's owner when it sets the socket up; a plain value.
    @exclusivity(unchecked) public var frameLimit: Int = 16
    #endif
    /// The storage of received messages, reused.
    private let framePool = FrameStoragePool()
    /// Where the content of small joined sends comes from (``send(routing:joining:_:)``).
    let sendBlocks: SendBlocks
    /// The descriptor libzmq makes readable when commands for the socket are queued (`ZMQ_FD`): a
    /// message arriving on a pipe the socket had found empty is one of them. A ``Reactor`` polls it.
    let signalDescriptor: Int32
    /// What a ``Reactor`` knows of the socket between its questions (``messageWaiting()``); the reactor
    /// thread only, like every other use of the socket. Unchecked in release builds, as `handle`.
    #if DEBUG
    private(set) var readiness = Readiness.unknown
    #else
    @exclusivity(unchecked) private(set) var readiness = Readiness.unknown
    #endif

    /// Whether the socket may have a message waiting that its `ZMQ_FD` will not announce.
    ///
    /// `ZMQ_FD` is edge-triggered: any libzmq call on the socket (a send, a receive, a question) may
    /// take in the queued commands, and with them the descriptor's signal, while making a message
    /// ready. So every call that reaches libzmq (through `rawHandle`) leaves the socket `unknown`
    /// until the reactor asks `ZMQ_EVENTS`, except a receive that found nothing: that one took in every
    /// queued command and found every pipe empty, so from then on a new message signals the
    /// descriptor (`drained`).
    enum Readiness {
        case unknown
        case drained
        case asked
    }

    /// Whether a ``Reactor`` watches the socket (registered): it asks `ZMQ_EVENTS` of the socket
    /// before it sleeps whenever the socket is ``Readiness/unknown``, so ``receiveBatch(limit:_:)``
    /// may leave that question to it (see ``quietProbes``). Reactor thread only; unchecked in release
    /// builds, as ``readiness``.
    #if DEBUG
    var watchedByReactor = false
    #else
    @exclusivity(unchecked) var watchedByReactor = false
    #endif
    /// How many times in a row the receive right after a batch's first message found nothing
    /// (capped); zeroed when one found a message, or when ``messageWaiting()`` said one waits.
    ///
    /// That receive costs libzmq what a `ZMQ_EVENTS` question costs (each takes in the socket's
    /// queued commands). On a socket the reactor watches, once it has found nothing
    /// ``quietBeforeSkipping`` times in a row (one message at a time: a latency round trip), it is
    /// not made: the socket is left unknown, and the reactor's question before the poll answers for
    /// it. When the handler also sends on the socket (a worker's RESULT, a coordinator's next
    /// SUBMIT), that question was to be asked anyway: one call into libzmq fewer a message (~650
    /// instructions). Should a message be waiting after all, the question says so and the next turn
    /// reads it; the socket counts as busy again, and is drained to the end as before until it has
    /// been quiet that many times.
    #if DEBUG
    private(set) var quietProbes: UInt8 = 0
    #else
    @exclusivity(unchecked) private(set) var quietProbes: UInt8 = 0
    #endif
    static let quietBeforeSkipping: UInt8 = 8

    /// Opens a socket.
    /// - Throws: ``ZMQError`` when the context is terminated or out of sockets.
    public convenience init(_ context: ZMQContext, type: SocketType) throws(ZMQError) {
        try self.init(context, type: type, sendBlocks: .shared)
    }

    /// Opens a socket whose small joined sends use blocks from `sendBlocks`.
    init(_ context: ZMQContext, type: SocketType, sendBlocks: SendBlocks) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.raw) else {
            throw ZMQError.last("zmq_socket")
        }
        var descriptor: Int32 = -1
        var size = MemoryLayout<Int32>.size
        if zmq_getsockopt(handle, ZMQ_FD, &descriptor, &size) != 0 {
            let error = ZMQError.last("getsockopt ZMQ_FD")
            zmq_close(handle)
            throw error
        }
        self.context = context
        self.handle = handle
        self.type = type
        self.signalDescriptor = descriptor
        self.sendBlocks = sendBlocks
    }

    deinit {
        // Owners close explicitly on their own thread; this only catches a socket dropped unclosed.
        if let handle { zmq_close(handle) }
    }

    var rawHandle: UnsafeMutableRawPointer {
        guard let handle else { preconditionFailure("socket used after close") }
        self.readiness = .unknown
        return handle
    }

    /// Whether a message is waiting (`ZMQ_EVENTS` has `ZMQ_POLLIN`), for a ``Reactor`` about to sleep
    /// while the socket is ``Readiness/unknown`` (a drained one is not asked: it has none). Asking
    /// takes in the commands queued for the socket, and with them the descriptor's signal.
    /// - Throws: ``ZMQError`` when libzmq cannot answer (`ETERM`: the context is being terminated).
    func messageWaiting() throws(ZMQError) -> Bool {
        guard let handle else { return false }
        defer { self.readiness = .asked }
        if self.readiness == .drained { return false }
        var events: Int32 = 0
        var size = MemoryLayout<Int32>.size
        while zmq_getsockopt(handle, ZMQ_EVENTS, &events, &size) != 0 {
            let error = ZMQError.last("getsockopt ZMQ_EVENTS")
            if !error.isInterrupted { throw error }
        }
        guard events & ZMQ_POLLIN != 0 else { return false }
        self.quietProbes = 0
        return true
    }

    /// Called by a ``Reactor`` whose poll found the socket's descriptor readable (or that has just
    /// registered it): there are commands to take in, which the handler's receive (or, if it does not
    /// receive, the next ``messageWaiting()``) does.
    func signalled() {
        self.readiness = .unknown
    }

    /// Whether ``close()`` has been called.
    public var isClosed: Bool { self.handle == nil }

    /// Sets an option (before `bind`/`connect` for most options).
    public func set(_ option: SocketOption) throws(ZMQError) {
        if option.apply(to: self.rawHandle) != 0 { throw ZMQError.last("setsockopt \(option)") }
    }

    /// Binds to an endpoint such as `tcp://*:5555` or `tcp://127.0.0.1:*` (an ephemeral port).
    public func bind(_ endpoint: String) throws(ZMQError) {
        if zmq_bind(self.rawHandle, endpoint) != 0 { throw ZMQError.last("bind \(endpoint)") }
    }

    /// Connects to an endpoint; libzmq connects (and reconnects) in the background.
    public func connect(_ endpoint: String) throws(ZMQError) {
        if zmq_connect(self.rawHandle, endpoint) != 0 { throw ZMQError.last("connect \(endpoint)") }
    }

    /// The endpoint last bound, with the real port when bound to `*` (`ZMQ_LAST_ENDPOINT`).
    public func lastEndpoint() throws(ZMQError) -> String {
        var buffer = [CChar](repeating: 0, count: 512)
        var size = buffer.count
        if zmq_getsockopt(self.rawHandle, ZMQ_LAST_ENDPOINT, &buffer, &size) != 0 {
            throw ZMQError.last("getsockopt ZMQ_LAST_ENDPOINT")
        }
        let bytes = buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Closes the socket (with the socket's linger). Safe to call twice.
    public func close() {
        if let handle {
            zmq_close(handle)
            self.handle = nil
            self.readiness = .unknown
        }
    }

    /// Receives one whole message without blocking; nil when none is waiting.
    public func receive() throws(ZMQError) -> Multipart? {
        let received = try Multipart.receive(
            from: self.rawHandle,
            limit: self.frameLimit,
            dontWait: true,
            pool: self.framePool
        )
        switch consume received {
        case .none:
            // libzmq took in every queued command before it found nothing (a non-blocking receive
            // does not throttle them): the descriptor now announces the next message.
            self.readiness = .drained
            return nil
        case .some(let message):
            return message
        }
    }

    /// Receives one whole message, blocking. For plain threads only (tests, tools), never on a reactor.
    public func receiveBlocking() throws(ZMQError) -> Multipart {
        while true {
            do throws(ZMQError) {
                if let message = try Multipart.receive(from: self.rawHandle, limit: self.frameLimit, dontWait: false) {
                    return message
                }
            } catch  where error.isInterrupted {
                continue
            }
        }
    }

    /// Sends a message whose frames are copies of `parts`, without blocking.
    /// - Returns: ``SendStatus/sent``, or why nothing was queued.
    /// - Throws: ``ZMQError`` for errors other than `EAGAIN` and `EHOSTUNREACH`.
    @discardableResult
    public func send(_ parts: [[UInt8]]) throws(ZMQError) -> SendStatus {
        precondition(!parts.isEmpty, "a message has at least one frame")
        for (i, part) in parts.enumerated() {
            if let status = try self.sendFrame(part, more: i < parts.count - 1, first: i == 0) { return status }
        }
        return .sent
    }

    /// Sends a message whose frames are copies of `routing` (when given) and then `frames`, read in
    /// place; nothing is allocated on the way (small frames are copied into libzmq's messages).
    /// - Returns: ``SendStatus/sent``, or why nothing was queued.
    /// - Throws: ``ZMQError`` for errors other than `EAGAIN` and `EHOSTUNREACH`.
    public func send(
        routing: UnsafeRawBufferPointer?,
        frames: UnsafeBufferPointer<UnsafeRawBufferPointer>
    ) throws(ZMQError) -> SendStatus {
        precondition(routing != nil || !frames.isEmpty, "a message has at least one frame")
        if let routing, let status = try self.sendFrame(routing, more: !frames.isEmpty, first: true) {
            return status
        }
        for (i, frame) in frames.enumerated() {
            if let status = try self.sendFrame(frame, more: i < frames.count - 1, first: routing == nil && i == 0) {
                return status
            }
        }
        return .sent
    }

    /// Sends `routing` (when given), then `head` and `body` joined in one frame: copied into one
    /// message, as `zmq_send` copies one buffer (a BATCH's header in front of its packed messages); a
    /// small one into a block of ``SendBlocks``, reused once libzmq is done with it.
    public func send(
        routing: UnsafeRawBufferPointer?,
        joining head: UnsafeRawBufferPointer,
        _ body: UnsafeRawBufferPointer
    ) throws(ZMQError) -> SendStatus {
        if let routing, let status = try self.sendFrame(routing, more: true, first: true) { return status }
        var message = zmq_msg_t()
        if head.count + body.count <= self.sendBlocks.blockSize {
            // Over a block kept between sends, not a new allocation (see ``SendBlocks``).
            try self.sendBlocks.initialize(&message, joining: head, body)
        } else {
            guard zmq_msg_init_size(&message, head.count + body.count) == 0 else {
                throw ZMQError.last("zmq_msg_init_size")
            }
            if let data = zmq_msg_data(&message) {
                if let base = head.baseAddress { data.copyMemory(from: base, byteCount: head.count) }
                if let base = body.baseAddress { (data + head.count).copyMemory(from: base, byteCount: body.count) }
            }
        }
        let rc = zmq_msg_send(&message, self.rawHandle, ZMQ_DONTWAIT)
        if rc < 0 { zmq_msg_close(&message) }  // not queued: still ours
        return try Self.check(rc, first: routing == nil) ?? .sent
    }

    /// Sends `prefix` (copied) followed by frames `start...` of `message`, which are moved, not copied.
    ///
    /// When nothing could be queued (``SendStatus/wouldBlock`` or ``SendStatus/hostUnreachable``) the
    /// message is left intact, so the caller can keep it.
    public func send(
        prefix: [[UInt8]],
        forwarding message: inout Multipart,
        from start: Int
    ) throws(ZMQError) -> SendStatus {
        let forwarded = max(0, message.count - start)
        precondition(!prefix.isEmpty || forwarded > 0, "a message has at least one frame")
        for (i, part) in prefix.enumerated() {
            let more = i < prefix.count - 1 || forwarded > 0
            if let status = try self.sendFrame(part, more: more, first: i == 0) { return status }
        }
        for index in start..<max(start, message.count) {
            let more = index < message.count - 1
            let rc = zmq_msg_send(message.takeFrame(index), self.rawHandle, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0))
            if rc >= 0 { message.frameSent(index) }
            if let status = try Self.check(rc, first: prefix.isEmpty && index == start) { return status }
        }
        return .sent
    }

    /// Sends one frame; returns a status when nothing was queued.
    private func sendFrame(_ bytes: [UInt8], more: Bool, first: Bool) throws(ZMQError) -> SendStatus? {
        let rc = bytes.withUnsafeBytes { buffer in
            zmq_send(self.rawHandle, buffer.baseAddress, buffer.count, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0))
        }
        return try Self.check(rc, first: first)
    }

    private func sendFrame(_ bytes: UnsafeRawBufferPointer, more: Bool, first: Bool) throws(ZMQError) -> SendStatus? {
        let rc = zmq_send(self.rawHandle, bytes.baseAddress, bytes.count, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0))
        return try Self.check(rc, first: first)
    }

    /// libzmq checks the high-water mark and the peer on a message's first frame only; after that the
    /// rest of a multipart message is always accepted. So `EAGAIN`/`EHOSTUNREACH` on the first frame
    /// mean "nothing queued", and any error later is a real failure.
    private static func check(_ rc: Int32, first: Bool) throws(ZMQError) -> SendStatus? {
        guard rc < 0 else { return nil }
        let error = ZMQError.last("send")
        if first && error.isWouldBlock { return .wouldBlock }
        if first && error.isHostUnreachable { return .hostUnreachable }
        throw error
    }

    /// Receives up to `limit` waiting messages without blocking and hands each to `body`. Stops early
    /// when the socket is drained, or closed by `body`.
    /// - Returns: how many were received.
    @discardableResult
    public func receiveBatch(limit: Int = 256, _ body: (inout Multipart) -> Void) throws(ZMQError) -> Int {
        var count = 0
        while count < limit && !self.isClosed {
            // After the first message of a quiet socket, the reactor's question answers for another
            // (``quietProbes``).
            if count == 1 && self.watchedByReactor && self.quietProbes >= Self.quietBeforeSkipping { return count }
            let received = try self.receive()
            switch consume received {
            case .none:
                if count == 1 && self.quietProbes < Self.quietBeforeSkipping { self.quietProbes += 1 }
                return count
            case .some(var message):
                if count == 1 { self.quietProbes = 0 }
                body(&message)
            }
            count += 1
        }
        return count
    }
}
