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
