import SkyNetCore

/// A batch of a job's events with its final results apart, as ``Coordinator/submitWithFinalsApart(_:moreToCome:)``
/// delivers them: `events` holds no ``CoordinatorEvent/final(_:)``.
package struct EventBatch: Sendable {
    /// The batch's other events, in order.
    package var events: [CoordinatorEvent]
    /// Its final results, in order; optional so that a consumer can take each out where it lies
    /// (`finals[i].take()`) rather than copy it (through the array's subscript, a getter, or a
    /// buffer's addressor, each result was copied whole, its references retained and released).
    package var finals: [FinalResult?]

    package init(events: [CoordinatorEvent], finals: [FinalResult?]) {
        self.events = events
        self.finals = finals
    }

    /// A batch of ``Coordinator/submit(_:)``'s, its final results taken apart (a ``ResultCache``
    /// job's batches, which are not on the hot path).
    package init(_ batch: [CoordinatorEvent]) {
        self.events = []
        self.finals = []
        for event in batch {
            if case .final(let result) = event { self.finals.append(result) } else { self.events.append(event) }
        }
    }
}

extension Coordinator {
    /// ``submit(_:moreToCome:)`` for `skynet submit`, whose batches carry the final results in an
    /// array of their own, which the caller takes each out of where it lies. Out of an event batch
    /// each was moved through the enum (five or six copies of its ~150 bytes) and the enum consumed
    /// and destroyed. The other events, and the order of the final results, are the same; where a
    /// batch's final results fell among its other events is not kept.
    package func submitWithFinalsApart(
        _ tasks: [ScanTask],
        moreToCome: Bool
    ) throws(CoordinatorError) -> AsyncThrowingStream<EventBatch, any Error> {
        try self.checkCanStart()
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: EventBatch.self)
        try self.start(tasks, delivery: .apart(Sink(continuation)), open: moreToCome)
        return stream
    }
}
