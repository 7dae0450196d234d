/// The broker's live tasks: entries in a slab of slots, found through a `TaskID → slot` map with
/// 4-byte values. A dictionary of whole entries would keep ~104-byte buckets, half of them empty after
/// its last doubling; a million queued tasks cost about 90 bytes each here instead.
package struct TaskTable {
    private var slots: [BrokerState.TaskEntry?] = []
    private var freeSlots: [UInt32] = []
    private var index: [TaskID: UInt32] = [:]
    /// An emptied table keeps its storage up to this many slots.
    package static let keptSlots = 4096

    package var count: Int { self.index.count }
    package var isEmpty: Bool { self.index.isEmpty }

    package subscript(id: TaskID) -> BrokerState.TaskEntry? {
        get { self.index[id].flatMap { self.slots[Int($0)] } }
        _modify {
            // In place: `tasks[id]!.worker = w` must not copy the entry (its envelope and input) out
            // and back.
            if let slot = self.index[id] {
                yield &self.slots[Int(slot)]
                if !self.occupied(Int(slot)) { self.free(id, slot: slot) }
            } else {
                var value: BrokerState.TaskEntry? = nil
                yield &value
                if let value { self.insert(value, for: id) }
            }
        }
        set {
            if let slot = self.index[id] {
                if let newValue {
                    self.slots[Int(slot)] = newValue
                } else {
                    self.free(id, slot: slot)
                }
            } else if let newValue {
                self.insert(newValue, for: id)
            }
        }
    }

    /// Calls `body` with the entry for `id` read in place (its envelope and input are not copied);
    /// nil when there is none.
    package func withEntry<R>(_ id: TaskID, _ body: (borrowing BrokerState.TaskEntry) -> R) -> R? {
        guard let slot = self.index[id], self.occupied(Int(slot)) else { return nil }
        return body(self.slots[Int(slot)]!)
    }

    /// ``withEntry(_:_:)`` for callers in another module (the actor's TASK writer): not generic, so
    /// the call needs no metadata at run time. Returns false when there is no entry.
    package func visitEntry(_ id: TaskID, _ body: (borrowing BrokerState.TaskEntry) -> Void) -> Bool {
        guard let slot = self.index[id], self.occupied(Int(slot)) else { return false }
        // Borrowed where it lies: `body(self.slots[slot]!)` copied the entry out of the array first
        // (its envelope, input and ids retained and released, once per TASK sent). The buffer
        // pointer does not outlive this call, `slot` was checked to hold an entry just above, and
        // `body` cannot change the table meanwhile (the caller's access to it is still open: a
        // write from `body` would be an exclusivity violation, trapped at run time).
        self.slots.withUnsafeBufferPointer { slots in body(slots[Int(slot)]!) }
        return true
    }

    /// Whether `slot` holds an entry, read through one of its fields: comparing the whole optional
    /// entry with nil copied it (its envelope, input and ids retained and released).
    @inline(__always)
    private func occupied(_ slot: Int) -> Bool { self.slots[slot]?.ticket != nil }

    /// When `id` was queued, if it is queued under `ticket` (read in place, field by field).
    package func queuedAt(_ id: TaskID, ticket: UInt64) -> UInt32? {
        self.queuedSlot(id, ticket: ticket).flatMap { self.slots[$0]?.queuedAt }
    }

    /// The slot of `id` if it is queued (no worker) under `ticket`.
    private func queuedSlot(_ id: TaskID, ticket: UInt64) -> Int? {
        guard let slot = self.index[id], self.slots[Int(slot)]?.ticket == ticket, self.slots[Int(slot)]?.worker == nil
        else { return nil }
        return Int(slot)
    }

    /// Leases `id` to `worker` if it is queued under `ticket`, with one lookup: when it was queued,
    /// or nil when that ticket is no longer the live one (the task was requeued, cancelled or ended).
    package mutating func leaseIfQueued(_ id: TaskID, ticket: UInt64, to worker: PeerID) -> UInt32? {
        guard let slot = self.queuedSlot(id, ticket: ticket) else { return nil }
        return Self.lease(&self.slots[slot], to: worker)
    }

    /// Sets the entry's worker and reads its queue time through one in-place access (reading
    /// `slots[slot]?.queuedAt` after the write copied the whole entry out first).
    private static func lease(_ entry: inout BrokerState.TaskEntry?, to worker: PeerID) -> UInt32? {
        entry?.worker = worker
        return entry?.queuedAt
    }

    /// The coordinator of a live task, read in place.
    package func coordinator(of id: TaskID) -> PeerID? {
        guard let slot = self.index[id] else { return nil }
        return self.slots[Int(slot)]?.coordinator
    }

    /// The coordinator and kind of a task that is leased to `worker` in `attempt` (nil otherwise),
    /// read in place.
    package func coordinatorAndKind(of id: TaskID, leasedTo worker: PeerID, attempt: UInt32) -> (PeerID, String)? {
        guard let slot = self.index[id], self.slots[Int(slot)]?.attempt == attempt,
            self.slots[Int(slot)]?.worker == worker, let coordinator = self.slots[Int(slot)]?.coordinator,
            let kind = self.slots[Int(slot)]?.envelope.kind
        else { return nil }
        return (coordinator, kind)
    }

    private mutating func insert(_ entry: BrokerState.TaskEntry, for id: TaskID) {
        let slot: UInt32
        if let reused = self.freeSlots.popLast() {
            slot = reused
            self.slots[Int(slot)] = entry
        } else {
            slot = UInt32(self.slots.count)
            self.slots.append(entry)
        }
        self.index[id] = slot
    }

    @discardableResult
    package mutating func removeValue(forKey id: TaskID) -> BrokerState.TaskEntry? {
        guard let slot = self.index.removeValue(forKey: id) else { return nil }
        // Moved out of its slot, not copied (a copy retained the entry's envelope, input and ids).
        let entry = self.slots[Int(slot)].take()
        self.freed(slot)
        return entry
    }

    /// Every live entry, in no particular order (an array of them all: for rare work like a snapshot).
    package var values: [BrokerState.TaskEntry] { self.slots.compactMap { $0 } }

    /// Visits every live entry without copying them into an array.
    package func forEach(_ body: (BrokerState.TaskEntry) -> Void) {
        for case let entry? in self.slots { body(entry) }
    }

    private mutating func free(_ id: TaskID, slot: UInt32) {
        self.index[id] = nil
        self.slots[Int(slot)] = nil
        self.freed(slot)
    }

    /// `slot` is empty and out of the index: it is reused (or the storage given back).
    private mutating func freed(_ slot: UInt32) {
        if self.index.isEmpty {
            // Empty again: give the memory back rather than keep a slab sized for the peak (a small
            // one stays, so tasks that come and go one at a time do not allocate it every time).
            let keep = self.slots.count <= Self.keptSlots
            self.slots.removeAll(keepingCapacity: keep)
            self.freeSlots.removeAll(keepingCapacity: keep)
        } else {
            self.freeSlots.append(slot)
        }
    }
}
