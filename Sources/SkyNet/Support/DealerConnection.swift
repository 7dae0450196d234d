import Logging
import ZeroMQ

/// A worker's or coordinator's DEALER connection to the broker, owned by an actor on a ``Reactor``.
///
/// It sets the socket up (DESIGN.md §6), sends through an ``Outbox``: what one turn of the reactor
/// sends leaves as one BATCH just before the reactor polls again, and nothing is lost when the broker
/// is not connected or is slow (`EAGAIN` parks the message; a timer retries every 5 ms until the
/// outbox is empty). It closes with a short linger so a goodbye still leaves.
///
/// Not `Sendable`: it lives on the reactor thread of the actor that owns it, like its socket.
final class DealerConnection {
    let socket: Socket
    private let reactor: Reactor
    private let logger: Logger
    private var outbox = Outbox()
    private var flushTimer: TimerID?
    private var flushHook: TimerID?

    /// Connects to `endpoint` with routing id `id` and calls `onReadable` on the reactor whenever a
    /// message is waiting. Call on the reactor thread.
    init(
        reactor: Reactor,
        endpoint: String,
        id: PeerID,
        logger: Logger,
        onReadable: @escaping () -> Void
    )
        throws(ZMQError)
    {
        let socket = try Socket(reactor.context, type: .dealer)
        do throws(ZMQError) {
            try SocketSetup.dealer(socket, id: id)
            try socket.connect(endpoint)
        } catch {
            socket.close()
            throw error
        }
        self.socket = socket
        self.reactor = reactor
        self.logger = logger
        reactor.register(socket, handler: onReadable)
        self.flushHook = reactor.beforePoll { [weak self] in self?.flushGathered() }
    }

    /// Receives a bounded batch of what is waiting and hands each decoded message (each message of
    /// a BATCH in turn) to `handle`; a message that does not decode is logged and dropped. Call from
    /// the socket's readable handler.
    func receiveMessages(_ handle: (WireMessage) -> Void) {
        do throws(ZMQError) {
            _ = try self.socket.receiveBatch { message in
                do throws(ProtocolError) {
                    try WireMessage.visit(message) { decoded in
                        switch decoded {
                        case .success(let decoded): handle(decoded)
                        case .failure(let error):
                            self.logger.warning("bad message from broker dropped", metadata: ["reason": "\(error)"])
                        }
                        // A DISCONNECT handled above may have closed the socket: the rest is for nobody.
                        return !self.socket.isClosed
                    }
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
        self.flushTimer = self.reactor.schedule(after: .milliseconds(2), every: .milliseconds(5)) { [weak self] in
            self?.flush()
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
        guard !self.socket.isClosed else { return }
        self.reactor.unregister(self.socket)
        try? self.socket.set(.linger(milliseconds: Int32(clamping: linger.milliseconds)))
        self.socket.close()
    }
}
