extension Array {
    /// Empties the array and keeps its storage, for buffers reused once or more per message.
    /// `removeAll(keepingCapacity: true)` goes through the generic `replaceSubrange`: about 180
    /// instructions a call even for one or two elements (callgrind, the broker's SUBMIT and RESULT
    /// paths); removing from the end costs a few per element.
    @inlinable
    package mutating func removeAllKeepingCapacity() {
        while !self.isEmpty { self.removeLast() }
    }
}
