/// The ids of the tasks leased to one worker (``BrokerState/WorkerEntry/Load/leases``): a set of
/// ``TaskID``s in an open-addressed table of its own, probed linearly, at most half full, and
/// emptied by backward shift (no tombstones, so a worker that takes and returns millions of tasks
/// never needs a rehash).
///
/// A worker holds a few times its capacity at most (``ShortTaskPrefetch``), so the table is small
/// and stays in cache. `Set<TaskID>` cost ~390 instructions a task for the insert at dispatch and
/// the removal at the RESULT (its generic machinery, and a removal that rehashes the entries after
/// it); the ids hash with ``FastHash`` under the process's key, as in the set.
package struct LeaseSet: Sequence, ExpressibleByArrayLiteral {
    private struct Slot {
        var id: TaskID
        var used: Bool
    }

    /// A power of two in length (or empty), at most half used.
    private var slots: [Slot] = []
    package private(set) var count = 0
    /// ``FastHash/key``, read once (a `static let` costs a `swift_once` check on every use).
    private let key = FastHash.key

    package init() {}

    package init(arrayLiteral ids: TaskID...) {
        for id in ids { self.insert(id) }
    }

    package var isEmpty: Bool { self.count == 0 }

    /// Makes room for `capacity` ids without growing.
    package mutating func reserveCapacity(_ capacity: Int) {
        var size = 8
        while size < 2 * capacity { size *= 2 }
        if size > self.slots.count { self.resize(to: size) }
    }

    package func contains(_ id: TaskID) -> Bool {
        guard !self.slots.isEmpty else { return false }
        return self.slots.withUnsafeBufferPointer { slots in
            self.find(id, in: slots).found
        }
    }

    /// Adds `id`; returns whether it was not there yet.
    @discardableResult
    package mutating func insert(_ id: TaskID) -> Bool {
        if 2 * (self.count + 1) > self.slots.count { self.resize(to: Swift.max(8, 2 * self.slots.count)) }
        let key = self.key
        let inserted = self.slots.withUnsafeMutableBufferPointer { slots in
            let (found, index) = Self.find(id, in: UnsafeBufferPointer(slots), key: key)
            if found { return false }
            slots[index] = Slot(id: id, used: true)
            return true
        }
        if inserted { self.count += 1 }
        return inserted
    }

    /// Removes `id`; returns it when it was there.
    @discardableResult
    package mutating func remove(_ id: TaskID) -> TaskID? {
        guard !self.slots.isEmpty else { return nil }
        let key = self.key
        let removed = self.slots.withUnsafeMutableBufferPointer { slots -> Bool in
            let (found, index) = Self.find(id, in: UnsafeBufferPointer(slots), key: key)
            guard found else { return false }
            // Backward shift: each later entry of the run moves into the hole unless its own home
            // lies after the hole (cyclically), where a lookup would no longer reach it.
            let mask = slots.count - 1
            var hole = index
            var next = (index + 1) & mask
            while slots[next].used {
                let home = Self.home(slots[next].id, key: key, mask: mask)
                if (next &- home) & mask >= (next &- hole) & mask {
                    slots[hole] = slots[next]
                    hole = next
                }
                next = (next + 1) & mask
            }
            slots[hole].used = false
            return true
        }
        guard removed else { return nil }
        self.count -= 1
        return id
    }

    package func makeIterator() -> some IteratorProtocol<TaskID> {
        self.slots.lazy.filter(\.used).map(\.id).makeIterator()
    }

    private static func home(_ id: TaskID, key: UInt64, mask: Int) -> Int {
        FastHash.hash(id.high, id.low, key: key) & mask
    }

    /// Where `id` is, or the empty slot where it would go.
    private func find(_ id: TaskID, in slots: UnsafeBufferPointer<Slot>) -> (found: Bool, index: Int) {
        Self.find(id, in: slots, key: self.key)
    }

    private static func find(
        _ id: TaskID,
        in slots: UnsafeBufferPointer<Slot>,
        key: UInt64
    ) -> (found: Bool, index: Int) {
        let mask = slots.count - 1
        var index = Self.home(id, key: key, mask: mask)
        // At most half full: an empty slot ends every probe.
        while slots[index].used {
            if slots[index].id == id { return (true, index) }
            index = (index + 1) & mask
        }
        return (false, index)
    }

    private mutating func resize(to size: Int) {
        let old = self.slots
        self.slots = Array(repeating: Slot(id: .zero, used: false), count: size)
        let key = self.key
        self.slots.withUnsafeMutableBufferPointer { slots in
            for slot in old where slot.used {
                let (_, index) = Self.find(slot.id, in: UnsafeBufferPointer(slots), key: key)
                slots[index] = slot
            }
        }
    }
}
