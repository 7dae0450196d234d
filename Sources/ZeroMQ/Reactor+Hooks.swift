// Hooks before the poll (``beforePoll(when:_:)``), and how the loop calls a hook's or a socket
// handler's body: boxed (``Callback``) and without a retain. The internal helpers (`call(_:)`,
// `retire(_:)`, `runBeforePollHooks()`, `hookRequested(at:)`) are for the loop and for `register`,
// `unregister` and `cancel`, which run on the reactor thread.
extension Reactor {
    /// A socket handler's or a hook's body, boxed so that the loop calls it through an unretained
    /// reference: copying the closure out of its registration for the call retained and released its
    /// context (~40 instructions a call, six calls a latency round trip on the cluster's reactor).
    /// Safe because a box is never released while its body runs: ``unregister(_:)`` and
    /// ``cancel(_:)`` called during a body (which may remove itself) move the box to `retired`,
    /// emptied once no body is running (``call(_:)``); called from anything else (a job, a timer),
    /// they release it at once, as before.
    final class Callback {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Calls the body of `callback` (held by a registration or a hook, or by `retired`, throughout),
    /// then lets go of the boxes it removed. An `Unmanaged` taken where the callback is read: a
    /// `Callback` passed in would be retained for the call.
    @inline(__always)
    func call(_ callback: Unmanaged<Callback>) {
        self.bodiesRunning += 1
        callback._withUnsafeGuaranteedRef { $0.body() }
        self.bodiesRunning -= 1
        if self.bodiesRunning == 0 && !self.retired.isEmpty { self.retired.removeAll(keepingCapacity: true) }
    }

    /// What ``unregister(_:)`` and ``cancel(_:)`` do with the box they removed (see ``Callback``).
    func retire(_ callback: Callback) {
        if self.bodiesRunning > 0 { self.retired.append(callback) }
    }

    /// A hook from ``beforePoll(when:_:)``: its request is held strongly for its lifetime, and read
    /// through `requestRef` (no retain and release a turn).
    struct Hook {
        let id: UInt64
        let body: Callback
        let request: PollRequest?
        let requestRef: Unmanaged<PollRequest>?
    }

    /// Runs `body` on the reactor thread every time the loop is about to poll, after the jobs, timers
    /// and socket handlers of this turn: the place to send what the turn gathered, in one go. Cancel it
    /// with ``cancel(_:)``.
    ///
    /// With a `request`, the hook runs only before the polls its request was raised for
    /// (``PollRequest``): raised when the hook is added, lowered as the hook is called.
    @discardableResult
    public func beforePoll(when request: PollRequest? = nil, _ body: @escaping () -> Void) -> TimerID {
        self.assertOnReactor()
        let id = self.nextID
        self.nextID += 1
        request?.raised = true
        // Boxed, and called without a retain, as a handler is (see ``Callback``).
        self.beforePollHooks.append(
            Hook(
                id: id,
                body: Callback(body),
                request: request,
                requestRef: request.map { Unmanaged.passUnretained($0) }
            )
        )
        return TimerID(raw: id)
    }

    /// Runs each hook from ``beforePoll(_:)`` once, in the order they were added. By index, not over a
    /// copy of the list (which retained and released it every turn, ~40 instructions): a hook may
    /// cancel hooks (itself among them) or add one, so after each the next is the first whose id is
    /// greater (ids grow, and the list is in their order). A hook cancelled before its turn does not
    /// run; one added runs this turn.
    @inline(__always)
    func runBeforePollHooks() {
        var index = 0
        while index < self.beforePollHooks.count {
            let id = self.beforePollHooks[index].id
            if self.hookRequested(at: index) {
                let body = Unmanaged.passUnretained(self.beforePollHooks[index].body)
                self.call(body)
            }
            if index < self.beforePollHooks.count && self.beforePollHooks[index].id == id {
                index += 1
            } else {
                index = self.beforePollHooks.firstIndex { $0.id > id } ?? self.beforePollHooks.count
            }
        }
    }

    /// Whether the hook at `index` is to run now: it has no request, or its request is raised (and is
    /// then lowered). Read without a retain of the request: the hook holds it.
    @inline(__always)
    func hookRequested(at index: Int) -> Bool {
        guard let request = self.beforePollHooks[index].requestRef else { return true }
        return request._withUnsafeGuaranteedRef { request in
            guard request.raised else { return false }
            request.raised = false
            return true
        }
    }
}
