import SkyNetCore
import Logging
import Synchronization
import ZeroMQ

/// A worker's or coordinator's DEALER connection to the broker, owned by an actor on a ``Reactor``.
///
/// It sets the socket up (DESIGN.md §6), sends through an ``Outbox``: what one turn of the reactor
/// sends leaves as one BATCH just before the reactor polls again, and nothing is lost when the broker
/// is not connected or is slow (`EAGAIN` parks the message; a timer retries every 5 ms until the
/// outbox is empty). It closes with a short linger so a goodbye still leaves.
///
/// Not `Sendable`: it lives on the reactor thread of the actor that owns it, like its socket.
///
/// Its reactor holds it (its hook, its monitor's handler and its flush timer capture it) until
/// ``close(linger:)``, which its owner calls before letting it go. Not weakly: an object that is
/// weakly referenced keeps its counts in a side table, and every retain and release of it takes the
/// runtime's slow path; the hook alone, once a reactor turn, cost ~700 instructions a latency round
/// trip on the worker's reactor (a weak load, an exclusivity check, a slow release).
final class DealerConnection {
    /// Monitors made in this process (each needs its own inproc endpoint).
    private static let monitors = Atomic<Int>(0)
    /// Who connects, for the words of a failed handshake.
    enum Role: String {
        case worker, coordinator
    }

    let socket: Socket
    private let reactor: Reactor
    private let logger: Logger
    #if DEBUG
    private var outbox = Outbox()
    #else
    // Unchecked: an outbox calls no code of this connection (see docs/DESIGN.md §3, "Unchecked
    // exclusivity"; debug builds trap on an overlap).
    @exclusivity(unchecked) private var outbox = Outbox()
    #endif
    /// The kind of the last TASK read (a worker's tasks are mostly of one kind): a task sent alone
    /// made its kind's String anew (~240 instructions).
    private var lastTaskKind: String?
    private var flushTimer: TimerID?
    private var flushHook: TimerID?
    /// Raised by the outbox when it gathers: the flush hook runs only then (``PollRequest``).
    private let flushRequest = PollRequest()
    /// The socket's monitor: handshake failures show only there.
    private var monitor: Socket?
    private var handshake: HandshakeWatch
    private let onFailure: (SecurityError) -> Void

    /// Connects to `endpoint` with routing id `id` (with CURVE when `security` is given) and calls
    /// `onReadable` on the reactor whenever a message is waiting, and `onFailure` once if the
    /// handshake fails in a way retrying cannot mend (a refused key, a wrong broker key, CURVE on one
    /// side only). Call on the reactor thread.
    init(
        reactor: Reactor,
        endpoint: String,
        id: PeerID,
        role: Role,
        security: ClientSecurity?,
        keyAccepted: Bool = false,
        logger: Logger,
        onReadable: @escaping () -> Void,
        onFailure: @escaping (SecurityError) -> Void
    )
        throws(ZMQError)
    {
        let socket = try Socket(reactor.context, type: .dealer)
        var monitor: Socket?
        do throws(ZMQError) {
            try SocketSetup.dealer(socket, id: id)
            if let security, let secretKey = security.certificate.secretKey {
                try socket.set(
                    .curveClient(
                        serverKey: security.brokerKey,
                        publicKey: security.certificate.publicKey,
                        secretKey: secretKey
                    )
                )
                // A wrong broker key would otherwise make libzmq retry the handshake forever.
                try socket.set(.reconnectStopAfterFailedHandshake)
            }
            // Each connection's monitor has an inproc endpoint of its own: a client that moves to
            // another broker of its group makes a new connection at once, before the old monitor's
            // endpoint is gone, and the same name would be "address already in use".
            monitor = try socket.monitor(name: "\(id).\(Self.monitors.add(1, ordering: .relaxed).newValue)")
            try socket.connect(endpoint)
        } catch {
            socket.stopMonitoring()
            monitor?.close()
            socket.close()
            throw error
        }
        self.socket = socket
        self.monitor = monitor
        self.reactor = reactor
        self.logger = logger
        self.handshake = HandshakeWatch(
            endpoint: endpoint,
            role: role,
            curve: security != nil,
            keyAccepted: keyAccepted
        )
        self.onFailure = onFailure
        reactor.register(socket, handler: onReadable)
        if let monitor { reactor.register(monitor) { self.drainMonitor() } }
        self.outbox.requestFlushes(with: self.flushRequest)
        self.flushHook = reactor.beforePoll(when: self.flushRequest) { self.flushGathered() }
    }

    /// Reads the monitor's events; a handshake failure that retrying cannot mend is reported once.
    /// Once a handshake has succeeded the monitor goes: it would cost every poll of the reactor a
    /// socket more for the rest of the connection (about 2% of a round trip's instructions). A later
    /// failure (a broker restarted with another key) shows as silence, and the owner's reconnect
    /// makes a new connection, watched again.
    private func drainMonitor() {
        guard let monitor = self.monitor else { return }
        var failure: SecurityError?
        _ = try? monitor.receiveBatch(limit: 64) { message in
            guard let event = SocketEvent.decode(message) else { return }
            if let problem = self.handshake.observe(event), failure == nil { failure = problem }
        }
        if let failure {
            self.logger.info("handshake with the broker failed", metadata: ["error": "\(failure.message)"])
            self.onFailure(failure)
        } else if self.handshake.succeeded {
            self.stopMonitor()
        }
    }

    private func stopMonitor() {
        guard let monitor = self.monitor else { return }
        self.reactor.unregister(monitor)
        if !self.socket.isClosed { self.socket.stopMonitoring() }
        monitor.close()
        self.monitor = nil
    }

    /// Receives a bounded batch of what is waiting and hands each decoded message (each message of
    /// a BATCH in turn) to `handle`; a message that does not decode is logged and dropped. Call from
    /// the socket's readable handler.
    func receiveMessages(_ handle: (WireMessage) -> Void) {
        self.receiveMessages(read: WireMessage.readNothing, handle)
    }

    /// ``receiveMessages(_:)``, with the TASKs going to `tasks` instead, read in place (the input
    /// valid during the call): a worker scans them where they lie.
    func receiveMessages(
        tasks: (TaskID, UInt32, TaskEnvelope, UnsafeRawBufferPointer) -> Void,
        _ handle: (WireMessage) -> Void
    ) {
        // The kind of the task before, for the next to take (see ``TaskEnvelope/decode(_:previousKind:)``),
        // kept across messages (``lastTaskKind``).
        // Moved out and back, not copied (each copy of the String a retain and a release).
        var previousKind = self.lastTaskKind.take()
        defer { self.lastTaskKind = previousKind.take() }
        self.receiveMessages(
            read: { frames throws(ProtocolError) in
                try WireMessage.readTask(frames, .task, previousKind: &previousKind) { id, attempt, envelope, input in
                    tasks(id, attempt, envelope, input)
                    // A DISCONNECT handled may close the socket: then the rest is for nobody.
                    return !self.socket.isClosed
                }
            },
            handle
        )
    }

    /// ``receiveMessages(_:)``, with the RESULTs going to `results` and each task an ACCEPTED names
    /// (alone or in a list) to `accepted` instead, checked (``ResultView``, ``AcceptedView``) and read
    /// in place (the frames valid during the call): a coordinator copies out only what it keeps of
    /// one, instead of decoding it into a message and destroying that.
    func receiveMessages(
        results: (ResultView, WireMessage.RawFrames) -> Void,
        accepted: (_ id: TaskID, _ attempt: UInt32, _ requeued: Bool) -> Void,
        _ handle: (WireMessage) -> Void
    ) {
        self.receiveMessages(
            read: { frames throws(ProtocolError) in
                if let view = try ResultView(frames) {
                    results(view, frames)
                } else if let view = try AcceptedView(frames) {
                    view.forEach { accepted($0, $1, view.requeued) }
                } else {
                    return nil
                }
                return !self.socket.isClosed
            },
            handle
        )
    }

    /// Neither closure escapes. An optional closure would, and then what a worker's captured (the
    /// worker, which is weakly referenced, and its connection) was retained and released for every
    /// task, the worker through the runtime's slow path.
    private func receiveMessages(read: WireMessage.InPlaceReader, _ handle: (WireMessage) -> Void) {
        do throws(ZMQError) {
            _ = try self.socket.receiveBatch { message in
                do throws(ProtocolError) {
                    let form = try WireMessage.visit(message, read: read) { decoded in
                        switch decoded {
                        case .success(let decoded): handle(decoded)
                        case .failure(let error):
                            self.logger.warning("bad message from broker dropped", metadata: ["reason": "\(error)"])
                        }
                        // A DISCONNECT handled above may have closed the socket: the rest is for nobody.
                        return !self.socket.isClosed
                    }
                    self.outbox.heardFromBroker(form)
                } catch {
                    self.logger.warning("bad message from broker dropped", metadata: ["reason": "\(error)"])
                }
            }
        } catch {
            self.logger.error("receive failed", metadata: ["error": "\(error)"])
        }
    }

    /// Gathers a message to send when the reactor is about to poll (with the others of this turn), or
    /// parks it behind earlier ones.
    func send(_ message: WireMessage) {
        guard !self.socket.isClosed else { return }
        do throws(ZMQError) {
            if try self.outbox.enqueue(message, to: Outbox.direct, on: self.socket) == .parked {
                self.armFlush()
            }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// ``send(_:)`` for a task's SUBMIT, written straight into the BATCH from the task when it is
    /// small (a coordinator sends one per task: made into a message first, from a copy of the task,
    /// it cost ~400 instructions more). `task` is read during the call (where the job's list holds it:
    /// ``RetryLedger/send(at:_:)``).
    func sendSubmit(_ task: UnsafePointer<ScanTask>) {
        guard !self.socket.isClosed else { return }
        do throws(ZMQError) {
            if try self.outbox.enqueueSubmit(task, to: Outbox.direct, on: self.socket) == .parked { self.armFlush() }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// ``send(_:)`` for a RESULT, written straight into the BATCH from its parts when it is small
    /// (a worker sends one per task: made into a message first, it cost ~300 instructions more).
    /// `body` is read during the call (the output where a scan wrote it).
    func sendResult(
        _ id: TaskID,
        attempt: UInt32,
        _ status: ResultStatus,
        _ meta: ResultMeta,
        body: UnsafeRawBufferPointer
    ) {
        guard !self.socket.isClosed else { return }
        do throws(ZMQError) {
            let outcome = try self.outbox.enqueueResult(
                id,
                attempt: attempt,
                status,
                meta,
                body: body,
                to: Outbox.direct,
                on: self.socket
            )
            if outcome == .parked { self.armFlush() }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// Sends what this turn gathered (the reactor calls it before it polls).
    private func flushGathered() {
        guard self.outbox.hasPending, !self.socket.isClosed else { return }
        do throws(ZMQError) {
            if try self.outbox.flushPending(on: self.socket).parked { self.armFlush() }
        } catch {
            self.logger.error("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// Messages waiting to be sent.
    var parked: Int { self.outbox.count }

    private func armFlush() {
        guard self.flushTimer == nil else { return }
        self.flushTimer = self.reactor.schedule(after: .milliseconds(2), every: .milliseconds(5)) {
            self.flush()
        }
    }

    /// Sends what it can of the parked messages.
    func flush() {
        if !self.outbox.isEmpty, !self.socket.isClosed {
            do throws(ZMQError) {
                _ = try self.outbox.flush(on: self.socket)
            } catch {
                self.logger.error("send failed", metadata: ["error": "\(error)"])
            }
        }
        if self.outbox.isEmpty || self.socket.isClosed, let timer = self.flushTimer {
            self.reactor.cancel(timer)
            self.flushTimer = nil
        }
    }

    /// Stops watching the socket and closes it. With a linger, what was gathered is sent first and
    /// messages handed to libzmq get that long to leave; parked ones are dropped (all are, without).
    func close(linger: Duration = .zero) {
        if linger > .zero { self.flushGathered() }
        if let timer = self.flushTimer { self.reactor.cancel(timer) }
        self.flushTimer = nil
        if let hook = self.flushHook { self.reactor.cancel(hook) }
        self.flushHook = nil
        self.outbox.removeAll()
        self.stopMonitor()
        guard !self.socket.isClosed else { return }
        self.reactor.unregister(self.socket)
        try? self.socket.set(.linger(milliseconds: Int32(clamping: linger.milliseconds)))
        self.socket.close()
    }
}

/// What a client's monitor events say about its handshakes with the broker: a pure reading of
/// them, so the words of each failure are tested without sockets (security.md §1.6).
struct HandshakeWatch {
    let endpoint: String
    let role: DealerConnection.Role
    let curve: Bool
    private(set) var succeeded = false
    private(set) var reported = false

    /// The broker at this endpoint already accepted this key on an earlier connection (the owner
    /// reconnects): a broken handshake is then the broker going away (it closed during the handshake
    /// of a reconnect made on its goodbye), not a wrong key, and reconnecting mends it, as after a
    /// success on this connection.
    let keyAccepted: Bool

    init(endpoint: String, role: DealerConnection.Role, curve: Bool, keyAccepted: Bool = false) {
        self.endpoint = endpoint
        self.role = role
        self.curve = curve
        self.keyAccepted = keyAccepted
    }

    /// The failure `event` means, the first time there is one (then nil: it is reported once).
    mutating func observe(_ event: SocketEvent) -> SecurityError? {
        guard !self.reported else { return nil }
        let problem: String?
        switch event.kind {
        case .handshakeSucceeded:
            self.succeeded = true
            problem = nil
        case .handshakeFailedAuth:
            let other = self.role == .worker ? "coordinators'" : "workers'"
            let port = self.role == .worker ? "backend, :5556" : "frontend, :5555"
            problem =
                "the broker at \(self.endpoint) refused this key (not in its \(self.role.rawValue)s' allowlist; "
                + "or this is its \(other) port: \(self.role.rawValue)s connect to its \(port) by default)"
        case .handshakeFailedProtocol where event.value == SocketEvent.mechanismMismatch:
            problem =
                self.curve
                ? "the broker at \(self.endpoint) does not use CURVE (start it with --curve-secret), or it is not a SkyNet broker"
                : "the broker at \(self.endpoint) requires CURVE: pass --curve-secret and --broker-key (or SKYNET_CURVE_SECRET and SKYNET_BROKER_KEY)"
        case .handshakeFailedProtocol, .handshakeFailedNoDetail:
            // A wrong broker key shows here (the client cannot open the server's box): it never
            // succeeds. After a success this is a broken connection, which reconnecting mends.
            // Without CURVE here, the broker must be using it (the mismatch is not always reported first).
            problem =
                self.succeeded || self.keyAccepted
                ? nil
                : self.curve
                    ? "the CURVE handshake with the broker at \(self.endpoint) failed: wrong --broker-key, or the broker does not use CURVE, or it is not a SkyNet broker"
                    : "the handshake with the broker at \(self.endpoint) failed: it requires CURVE (pass --curve-secret and --broker-key, or SKYNET_CURVE_SECRET and SKYNET_BROKER_KEY), or it is not a SkyNet broker"
        default:
            problem = nil
        }
        guard let problem else { return nil }
        self.reported = true
        return SecurityError(.refused, problem)
    }
}
