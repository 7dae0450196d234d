import SkyNetCore
/// How a ``Coordinator`` connects and retries.
public struct CoordinatorConfiguration: Sendable {
    /// The broker's frontend endpoint, default `tcp://127.0.0.1:5555`.
    public var broker: String
    /// What happens to failed attempts (default: re-run locally, at most 3 attempts in all).
    public var retry: RetryPolicy
    /// Heartbeats to the broker (1 s, liveness 3).
    public var heartbeat: Heartbeat
    /// A job fails with ``CoordinatorError/Code/brokerUnreachable`` when the broker has not answered
    /// within this time of connecting (default 5 s).
    public var connectTimeout: Duration
    /// Broker silence after which unfinished remote attempts count as failed and go to the retry
    /// policy (default 15 s).
    public var brokerTimeout: Duration
    /// Slots of the local ScanSystem that runs local retries (default 4).
    public var localSlots: Int
    /// CURVE keys: this coordinator's pair and the broker's public key (nil: plain text).
    public var security: ClientSecurity?
    /// What this coordinator's jobs are called on the broker's dashboard and in its STATUS (default:
    /// the program's name and the job's number).
    public var jobName: String?
    /// Only looks (``Coordinator/brokerStatus(timeout:)``): sends no heartbeat and no job, so the
    /// broker neither counts it as a coordinator nor refuses it at `--max-coordinators` (what
    /// `skynet status` and health checks use). Default false.
    public var observer = false
    /// Where ``TaskTrace`` writes each task's SUBMIT, ACCEPTED and RESULTs (nil: nowhere). For the HA
    /// fault tests' checker.
    package var tracePath: String?
    /// Which completed results carry their output in the job's events (default: all). `skynet
    /// submit` prints only commands' output in its human format; with no job log, results directory
    /// or cache to keep the others', it asks for commands' only. Copying each output out of its
    /// RESULT to be freed unread cost ~680 instructions a task.
    package var outputs = OutputUse.all

    /// A configuration; every parameter has the default its property describes.
    public init(
        broker: String = "tcp://127.0.0.1:5555",
        retry: RetryPolicy = .local(maxAttempts: 3),
        heartbeat: Heartbeat = Heartbeat(),
        connectTimeout: Duration = .seconds(5),
        brokerTimeout: Duration = .seconds(15),
        localSlots: Int = 4,
        security: ClientSecurity? = nil,
        jobName: String? = nil
    ) {
        self.broker = broker
        self.retry = retry
        self.heartbeat = heartbeat
        self.connectTimeout = connectTimeout
        self.brokerTimeout = brokerTimeout
        self.localSlots = localSlots
        self.security = security
        self.jobName = jobName
    }
}
