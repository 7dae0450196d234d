import SkyNetCore
import Logging
import ZeroMQ

/// An error a coordinator reports to its user.
public struct CoordinatorError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong; more codes may be added.
    public struct Code: Hashable, Sendable {
        let name: String
        /// No answer from the broker within the connect timeout.
        public static let brokerUnreachable = Code(name: "broker unreachable")
        /// A job is already running on this coordinator.
        public static let busy = Code(name: "busy")
        /// The coordinator is closed.
        public static let closed = Code(name: "closed")
        /// Two tasks of a job share an id.
        public static let duplicateTask = Code(name: "duplicate task")
        /// A task's input is larger than one message may be (``ScanTask/maxInputBytes``).
        public static let taskTooLarge = Code(name: "task too large")
        /// The connection could not be set up.
        public static let connection = Code(name: "connection")
        /// The broker refused this coordinator: its key is not allowed (or was removed), the
        /// handshake failed (a wrong broker key, CURVE on one side only), or this is the workers' port.
        public static let refused = Code(name: "refused")
    }

    /// What went wrong.
    public let code: Code
    /// What happened and what to do, for people.
    public let message: String

    /// An error with a code and a message.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { self.message }

    /// Refuses a job with a task whose input is over ``ScanTask/maxInputBytes``, naming the first
    /// (its place in the job, from 1, and its id) before anything is sent: libzmq would drop the
    /// connection in silence, and the whole job would hang.
    public static func checkSizes(_ tasks: [ScanTask]) throws(CoordinatorError) {
        guard let index = tasks.firstIndex(where: { $0.input.count > ScanTask.maxInputBytes }) else { return }
        throw Self.tooLarge(tasks[index], what: "task \(index + 1) (id \(tasks[index].id))")
    }

    /// Throws ``Code/taskTooLarge`` for a task whose input is over ``ScanTask/maxInputBytes``.
    static func check(_ task: borrowing ScanTask) throws(CoordinatorError) {
        guard task.input.count > ScanTask.maxInputBytes else { return }
        throw Self.tooLarge(task, what: "task \(task.id)")
    }

    private static func tooLarge(_ task: borrowing ScanTask, what: String) -> CoordinatorError {
        let size = Double(task.input.count) / 1_048_576
        return CoordinatorError(
            .taskTooLarge,
            "\(what) has an input of \((size * 10).rounded() / 10) MiB, over the limit of \(ScanTask.maxInputBytes >> 10) KiB a task; pass large data by path (a shared file system) or split it"
        )
    }

    /// A ``Coordinator/run(_:)`` job ended, or a ``Coordinator/runChain(_:next:)`` task was done,
    /// with no final result to hand on.
    static let noFinalResult = CoordinatorError(.closed, "the job ended without a final result")

    /// The broker at `broker` did not answer within `timeout`.
    public static func unreachable(_ broker: String, within timeout: Duration) -> CoordinatorError {
        CoordinatorError(
            .brokerUnreachable,
            "no answer from the broker at \(broker) within \(DurationParser.format(timeout)); is `skynet broker` running there?"
        )
    }
}

extension DealerConnection {
    /// A client's (coordinator's or job client's) connection to a broker's frontend, with a failure
    /// as a ``CoordinatorError``.
    static func client(
        reactor: Reactor,
        broker: String,
        id: PeerID,
        security: ClientSecurity?,
        logger: Logger,
        onReadable: @escaping () -> Void,
        onFailure: @escaping (SecurityError) -> Void
    ) throws(CoordinatorError) -> DealerConnection {
        do throws(ZMQError) {
            return try DealerConnection(
                reactor: reactor,
                endpoint: broker,
                id: id,
                role: .coordinator,
                security: security,
                logger: logger,
                onReadable: onReadable,
                onFailure: onFailure
            )
        } catch {
            throw CoordinatorError(.connection, "cannot connect to \(broker): \(error.message)")
        }
    }
}
