/// The broker's live tasks: entries in a slab of slots, found through a `TaskID → slot` map
/// (``TaskIndex``, 24-byte buckets). A dictionary of whole entries would keep ~104-byte buckets, half
/// of them empty after its last doubling; a million queued tasks cost about 100 bytes each here
/// instead.
package struct TaskTable {
    /// Entries, live or vacant: a slot is live while ``index`` maps a task to it; a vacant one holds
    /// ``BrokerState/TaskEntry/vacant``. Not optional, so that the hot paths read a live entry's
    /// fields in place, through the buffer, without unwrapping an optional (reading
    /// `slots[slot]?.coordinator` copied the whole entry out first), and the TASK writer gets a plain
    /// pointer (``visitEntry(_:_:)``).
    private var slots: [BrokerState.TaskEntry] = []
    private var freeSlots: [UInt32] = []
    private var index = TaskIndex()
    /// An emptied table keeps its storage up to this many slots.
    package static let keptSlots = 4096
    package var count: Int { self.index.count }
    package var isEmpty: Bool { self.index.isEmpty }

    /// The slot of `id`: `hint`'s when the task is still there (no lookup), else the index's. A
    /// vacant slot holds ticket 0 and id zero, and a live one a ticket above 0 (``BrokerState/nextTicket()``),
    /// so a hint whose slot now holds another task, or none, or lies past the end, is never taken.
    @inline(__always)
    package func slot(of id: TaskID, hint: SlotHint) -> UInt32? {
        let slot = Int(hint.slot)
        let valid = self.slots.withUnsafeBufferPointer { slots in
            slot < slots.count && slots[slot].ticket != 0 && slots[slot].id == id
        }
        return valid ? hint.slot : self.index.slot(of: id)
    }

    /// The entry for `id` (a copy), or nil; setting nil removes it. The hot paths read and change
    /// entries in place through the methods below instead.
    package subscript(id: TaskID) -> BrokerState.TaskEntry? {
        get { self.index.slot(of: id).map { self.slots[Int($0)] } }
        set {
            if let slot = self.index.slot(of: id) {
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
    package func withEntry<R>(
        _ id: TaskID,
        hint: SlotHint = .none,
        _ body: (borrowing BrokerState.TaskEntry) -> R
    ) -> R? {
        guard let slot = self.slot(of: id, hint: hint) else { return nil }
        return self.slots.withUnsafeBufferPointer { slots in body(slots[Int(slot)]) }
    }

    /// ``withEntry(_:_:)`` for callers in another module (the actor's TASK writer): not generic, so
    /// the call needs no metadata at run time. `body` reads the entry through the pointer, where it
    /// lies; the pointer is valid only during the call and must not be kept. Returns false when there
    /// is no entry.
    package func visitEntry(
        _ id: TaskID,
        hint: SlotHint = .none,
        _ body: (UnsafePointer<BrokerState.TaskEntry>) -> Void
    ) -> Bool {
        guard let slot = self.slot(of: id, hint: hint) else { return false }
        // A pointer, not the entry: handed over as a value (even `borrowing`), the entry was copied
        // out of the array and destroyed after (its envelope, input and ids retained and released,
        // once per TASK sent), since the compiler cannot prove that `body` leaves the memory alone.
        // The buffer pointer does not outlive this call, `slot` comes from the index (so it is in
        // the array and live: from the index, or a hint checked against the id), and `body` cannot change the table meanwhile (the caller's access to
        // it is still open: a write from `body` would be an exclusivity violation, trapped at run
        // time).
        self.slots.withUnsafeBufferPointer { slots in body(slots.baseAddress! + Int(slot)) }
        return true
    }

    /// When the task in `slot` was queued, if it is queued there under `ticket` (a queue item, see
    /// ``TaskQueue/Item``), read in place.
    package func queuedAt(slot: UInt32, ticket: UInt64) -> UInt32? {
        guard self.isQueued(slot: Int(slot), ticket: ticket) else { return nil }
        return self.slots.withUnsafeBufferPointer { $0[Int(slot)].queuedAt }
    }

    /// Whether `slot` holds a task queued (no worker) under `ticket`. No lookup: tickets are never
    /// given twice and a vacant slot's is 0, which none is, so a match is the live task. The slot
    /// may be past the end (the table gave its storage back when it emptied).
    private func isQueued(slot: Int, ticket: UInt64) -> Bool {
        self.slots.withUnsafeBufferPointer { slots in
            slot < slots.count && slots[slot].ticket == ticket && slots[slot].isQueued
        }
    }

    /// Leases the task in `slot` to `worker` if it is queued there under `ticket`, without a lookup:
    /// its id and when it was queued, or nil when that ticket is no longer the live one (the task
    /// was requeued, cancelled or ended).
    package mutating func leaseIfQueued(slot: UInt32, ticket: UInt64, to worker: PeerID) -> (TaskID, UInt32)? {
        guard self.isQueued(slot: Int(slot), ticket: ticket) else { return nil }
        return Self.lease(&self.slots[Int(slot)], to: worker)
    }

    /// Sets the entry's worker and reads its id and queue time through one in-place access.
    private static func lease(_ entry: inout BrokerState.TaskEntry, to worker: PeerID) -> (TaskID, UInt32) {
        entry.worker = worker
        return (entry.id, entry.queuedAt)
    }

    /// The slot of a live task (for its queue item).
    package func slot(of id: TaskID) -> UInt32? { self.index.slot(of: id) }

    /// Adds `entry` (its id not yet here) and returns its slot, for its queue item.
    package mutating func add(_ entry: consuming BrokerState.TaskEntry) -> UInt32 {
        let id = entry.id
        return self.insert(entry, for: id)
    }

    /// The coordinator of a live task, read in place.
    package func coordinator(of id: TaskID, hint: SlotHint = .none) -> PeerID? {
        guard let slot = self.slot(of: id, hint: hint) else { return nil }
        return self.slots.withUnsafeBufferPointer { $0[Int(slot)].coordinator }
    }

    /// The coordinator and kind of a task that is leased to `worker` in `attempt` (nil otherwise),
    /// read in place.
    package func coordinatorAndKind(of id: TaskID, leasedTo worker: PeerID, attempt: UInt32) -> (PeerID, String)? {
        guard let slot = self.index.slot(of: id) else { return nil }
        return self.slots.withUnsafeBufferPointer { slots in
            let entry = UnsafePointer(slots.baseAddress! + Int(slot))
            guard entry.pointee.attempt == attempt, entry.pointee.isLeased(to: worker) else { return nil }
            return (entry.pointee.coordinator, entry.pointee.envelope.kind)
        }
    }

    /// `entry` is consumed: moved into its slot, not copied (a copy retained its envelope, input and
    /// ids, and the caller's released them after).
    @discardableResult
    private mutating func insert(_ entry: consuming BrokerState.TaskEntry, for id: TaskID) -> UInt32 {
        let slot: UInt32
        if let reused = self.freeSlots.popLast() {
            slot = reused
            self.slots[Int(slot)] = entry
        } else {
            slot = UInt32(self.slots.count)
            self.slots.append(entry)
        }
        self.index.set(id, to: slot)
        return slot
    }

    /// Removes the entry for `id` and returns what its end changes elsewhere, read in place: its
    /// coordinator, and its kind when it was queued (no worker held it); nil when there is none.
    /// The entry is released where it lies, not handed back.
    package mutating func remove(_ id: TaskID) -> (coordinator: PeerID, queuedKind: String?)? {
        guard let slot = self.index.remove(id) else { return nil }
        let ended = self.slots.withUnsafeBufferPointer { slots in
            let entry = slots.baseAddress! + Int(slot)
            return (entry.pointee.coordinator, entry.pointee.isQueued ? entry.pointee.envelope.kind : nil)
        }
        self.slots[Int(slot)] = .vacant
        self.freed(slot)
        return ended
    }

    /// Every live entry, in slot order (an array of them all: for rare work like a snapshot).
    package var values: [BrokerState.TaskEntry] {
        var values: [BrokerState.TaskEntry] = []
        self.forEach { values.append($0) }
        return values
    }

    /// Visits every live entry, in slot order, without copying them into an array.
    package func forEach(_ body: (BrokerState.TaskEntry) -> Void) {
        for (slot, entry) in self.slots.enumerated() where self.index.slot(of: entry.id) == UInt32(slot) { body(entry) }
    }

    private mutating func free(_ id: TaskID, slot: UInt32) {
        self.index.remove(id)
        self.slots[Int(slot)] = .vacant
        self.freed(slot)
    }

    /// `slot` is vacant and out of the index: it is reused (or the storage given back).
    private mutating func freed(_ slot: UInt32) {
        if self.index.isEmpty && self.slots.count > Self.keptSlots {
            // Empty again after a peak: give the memory back rather than keep a slab sized for it.
            self.slots.removeAll()
            self.freeSlots.removeAll()
            self.index.removeAll(keepingCapacity: false)
        } else {
            // A small table keeps its vacant slots listed as free, emptied or not (tasks that come
            // and go one at a time reuse one slot; emptying the slab each time its last task ended
            // cost ~150 instructions a latency round trip).
            self.freeSlots.append(slot)
        }
    }
}

/// Where a task's entry was in the ``TaskTable`` when an action, effect or held ACCEPTED named the
/// task: it saves looking the id up again (for a task queued long ago, a cache miss: in a sampled
/// profile of the deep-credit benchmark, the dispatch's second lookup alone was a tenth of the
/// broker's reactor thread). Checked against the id before use (``TaskTable/slot(of:hint:)``), since
/// the task may have ended and its slot been reused since. Not part of the identity of what carries
/// it: two hints are always equal, so effects compare as the tasks they name.
package struct SlotHint: Sendable, Equatable, CustomStringConvertible {
    package let slot: UInt32
    /// No hint: the id is looked up.
    package static let none = SlotHint(UInt32.max)

    package init(_ slot: UInt32) { self.slot = slot }

    package static func == (_: SlotHint, _: SlotHint) -> Bool { true }

    package var description: String { self.slot == .max ? "none" : "slot \(self.slot)" }
}
