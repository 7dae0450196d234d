import CZMQ
import Synchronization

/// A ZeroMQ context: the owner of libzmq's I/O threads. One per process is the norm.
///
/// Sockets keep their context alive; the context is terminated only by an explicit call to
/// ``terminate()``, never from `deinit`, because `zmq_ctx_term` blocks until every socket is closed.
/// The context is created with `ZMQ_BLOCKY=0`, so sockets default to `LINGER 0` and termination
/// cannot hang on unsent messages.
// SAFETY of @unchecked Sendable: libzmq documents contexts as thread-safe (zmq(7): "A ØMQ context is
// thread safe and may be shared among as many application threads as necessary"). This class holds
// only the immutable handle and a Mutex-guarded flag.
public final class ZMQContext: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private let terminated = Mutex(false)

    /// Creates a context.
    /// - Parameter ioThreads: libzmq I/O threads; one per gigabyte per second of traffic is plenty.
    /// - Throws: ``ZMQError`` when libzmq cannot create a context (out of file descriptors).
    public init(ioThreads: Int = 1) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else { throw ZMQError.last("zmq_ctx_new") }
        zmq_ctx_set(handle, ZMQ_IO_THREADS, Int32(ioThreads))
        zmq_ctx_set(handle, ZMQ_BLOCKY, 0)
        zmq_ctx_set(handle, ZMQ_MAX_SOCKETS, 4096)
        self.handle = handle
    }

    /// Terminates the context. Every socket must have been closed first, or this blocks.
    public func terminate() {
        let first = self.terminated.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        guard first else { return }
        while zmq_ctx_term(self.handle) != 0 && zmq_errno() == EINTR {}
    }

    /// libzmq's version, e.g. "4.3.4".
    public static var libraryVersion: String {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return "\(major).\(minor).\(patch)"
    }

    /// Whether libzmq was built with a capability such as `"curve"` or `"draft"`.
    public static func has(_ capability: String) -> Bool { zmq_has(capability) != 0 }
}
