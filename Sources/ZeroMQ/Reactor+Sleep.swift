import Synchronization

extension Reactor {
    /// Sleeps for `duration` on this reactor's timers: the task wakes on the reactor thread when
    /// the timer fires, with no timer thread and no hop through the global pool on the way (a
    /// `Task.sleep` costs three thread wake-ups per sleep: the timer's, the pool's, the reactor's).
    /// Called off the reactor thread it falls back to `Task.sleep`. Cancellation ends it at once with
    /// `CancellationError`; the timer then fires later to no effect.
    public nonisolated(nonsending) func sleep(for duration: Duration) async throws {
        guard self.isOnReactorThread else {
            try await Task.sleep(for: duration)
            return
        }
        let sleeper = Sleeper()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                guard sleeper.arm(continuation) else { return }
                // The continuation closure runs synchronously on this (the reactor) thread.
                self.schedule(after: duration) { sleeper.finish(nil) }
            }
        } onCancel: {
            sleeper.finish(CancellationError())
        }
    }
}

/// One sleep's continuation: resumed exactly once, by its timer or by cancellation, whichever is first.
private final class Sleeper: Sendable {
    private enum State {
        case waiting
        case armed(CheckedContinuation<Void, any Error>)
        case done
    }

    private let state = Mutex(State.waiting)

    /// Keeps the continuation; false (and resumed with `CancellationError`) when already cancelled.
    func arm(_ continuation: CheckedContinuation<Void, any Error>) -> Bool {
        let cancelled = self.state.withLock { state -> Bool in
            if case .done = state { return true }
            state = .armed(continuation)
            return false
        }
        if cancelled { continuation.resume(throwing: CancellationError()) }
        return !cancelled
    }

    func finish(_ error: (any Error)?) {
        let continuation = self.state.withLock { state -> CheckedContinuation<Void, any Error>? in
            defer { state = .done }
            if case .armed(let continuation) = state { return continuation }
            return nil
        }
        guard let continuation else { return }
        if let error { continuation.resume(throwing: error) } else { continuation.resume() }
    }
}
