extension Array {
    /// Empties the array and keeps its storage, for buffers reused once or more per message (the
    /// broker's actions and effects).
    /// `removeAll(keepingCapacity: true)` goes through the generic `replaceSubrange`: about 180
    /// instructions a call even for one or two elements (callgrind, the broker's SUBMIT and RESULT
    /// paths), and its elements are destroyed through their type metadata (`swift_arrayDestroy`, ~150
    /// for one effect); removing from the end costs a few per element.
    @inlinable
    package mutating func removeAllKeepingCapacity() {
        self.truncate(to: 0)
    }

    /// Removes the elements from `count` on and keeps the storage, for the same reason: a few
    /// instructions per element removed, where `removeSubrange(count...)` is ~70 for one or two.
    @inlinable
    package mutating func truncate(to count: Int) {
        precondition(count >= 0, "a negative count")
        while self.count > count { self.removeLast() }
    }
}
