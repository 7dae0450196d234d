/// A request that a hook added with ``Reactor/beforePoll(when:_:)`` run before the reactor's next
/// poll. Its owner raises it whenever it has work for the hook (an outbox gathering a message to send
/// before the poll); the reactor lowers it as it calls the hook. A hook whose owner has nothing for it
/// in a turn is then not called: on a reactor shared by a broker and a worker, each turn ran both
/// flush hooks, and most found nothing (~50 instructions each, three a latency round trip).
///
/// Reactor thread only, as the hook: it is raised and read by code running there.
public final class PollRequest {
    /// Whether the hook runs before the next poll. Unchecked in release builds (a class's stored
    /// property is otherwise checked for overlapping access at run time, ~60 instructions each time
    /// it is raised or read): only the reactor's thread touches it, one access at a time. Set from
    /// other modules through ``raise()``: their accesses to the property would be checked.
    #if DEBUG
    var raised = true
    #else
    @exclusivity(unchecked) var raised = true
    #endif

    public init() {}

    /// Asks for the hook before the next poll.
    public func raise() { self.raised = true }

    /// Whether the hook is asked for.
    public var isRaised: Bool { self.raised }
}
