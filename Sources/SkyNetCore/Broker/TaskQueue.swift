import DequeModule

/// The queued tasks of one kind: highest priority first; within a priority, **round robin by
/// coordinator** (each coordinator's tasks first in, first out), so a small job submitted just
/// after a large one from another coordinator is not stuck behind it.
///
/// Removal is lazy: the queue holds `(id, ticket)` pairs and the broker's task table says whether a
/// ticket is still the live one, so cancelling or expiring a task never scans the queue.
///
/// A class: the broker keeps one per kind in a dictionary and changes it on every submit and dispatch;
/// through a reference that costs a lookup, where a value in the dictionary went through its `modify`
/// accessor (which allocates for a value this size) each time. The last bucket stays when it empties,
/// so a queue that fills and drains one task at a time keeps its storage.
///
/// Everything that changes is one stored value (``Store``: buckets, lanes and counts as structs):
/// every use of a class's stored property is a dynamic exclusivity check (~80 instructions), so a
/// submit or a dispatch costs one here. When buckets and lanes were classes of their own, it cost
/// about seven per task.
package final class TaskQueue {
    /// The kind whose tasks it holds.
    package let kind: String
    /// The kind's figures (the queue records each dispatched task's wait there).
    package let figures: KindFigures
    #if DEBUG
    private var store = Store()
    #else
    // Release builds skip the dynamic exclusivity check of the properties marked so here; debug
    // builds (every test, the fuzzer) keep it. Why each is safe: docs/DESIGN.md §3, "Unchecked
    // exclusivity", and the line below.
    // Unchecked: `Store`'s methods touch only it; the closures of `popFirst` and `heads` must not
    // reach this queue (documented there; debug builds trap if they do).
    @exclusivity(unchecked) private var store = Store()
    #endif

    package init(kind: String, figures: KindFigures) {
        self.kind = kind
        self.figures = figures
    }

    /// A queued task as the queue holds it: its slot in the ``TaskTable`` and the ticket it was
    /// queued under, 16 bytes (its 16-byte id made an item 24). The table checks both as it finds
    /// the task live (``TaskTable/leaseIfQueued(slot:ticket:to:)``): a ticket is never given twice,
    /// so an item whose task ended, or was queued again, matches nothing, even once its slot holds
    /// another task.
    package struct Item: Equatable {
        package let slot: UInt32
        package let ticket: UInt64
    }

    /// Live items: queued tasks of the kind (``count`` also holds dead ones until they are popped).
    package var live: Int { self.store.live }
    /// Items in the queue, including ones that are no longer live.
    package var count: Int { self.store.count }
    package var isEmpty: Bool { self.store.count == 0 }

    /// Queues a task of `owner` at the back of its lane.
    package func append(_ item: Item, priority: Int32, owner: PeerID) {
        self.store.add(item, priority: priority, owner: owner, first: false)
    }

    /// Puts a task back at the head of its lane (a requeue after a lost worker goes first).
    package func prepend(_ item: Item, priority: Int32, owner: PeerID) {
        self.store.add(item, priority: priority, owner: owner, first: true)
    }

    /// A queued task was removed from the table (cancelled, its coordinator lost): its item is dead.
    package func forget() { self.store.live -= 1 }

    /// Calls `body` with the first `perLane` items of every lane (live or not): the next tasks of each
    /// coordinator, among them the oldest queued (a lane is first in, first out but for requeues).
    /// `body` must not change this queue (it is read meanwhile).
    package func heads(perLane: Int, _ body: (Item) -> Void) {
        self.store.heads(perLane: perLane, body)
    }

    /// Pops items until `isLive` accepts one; dead items are discarded on the way. `isLive` must not
    /// change this queue.
    package func popFirst(where isLive: (Item) -> Bool) -> Item? {
        self.store.popFirst(where: isLive)
    }

    /// An emptied lane keeps storage for up to this many items.
    package static let keptCapacity = 4096

    /// One coordinator's tasks at one priority.
    private struct Lane {
        var owner: PeerID
        var items: Deque<Item> = []
        /// In the bucket's ring (it has items, or had and its turn has not come).
        var inRing = false
        /// The most items held since the lane was last empty: storage sized for many is given back.
        var peak = 0

        mutating func add(_ item: Item, first: Bool) {
            if first { self.items.prepend(item) } else { self.items.append(item) }
            self.peak = max(self.peak, self.items.count)
        }
    }

    /// One priority's lanes, in a slab: `ring` holds their slots in turn order (its first lane gives
    /// the next task, then goes to the back), `index` finds a coordinator's lane when it is not the
    /// one used last.
    private struct Bucket {
        let priority: Int32
        var lanes: [Lane] = []
        var freeLanes: [Int] = []
        var index: [PeerID: Int] = [:]
        var ring: Deque<Int> = []
        /// The lane appended to last: a burst of SUBMITs from one coordinator finds it without hashing.
        var lastLane: Int?

        init(priority: Int32) { self.priority = priority }

        var isEmpty: Bool { self.ring.isEmpty }

        /// Adds `item` to `owner`'s lane, which joins the ring if it is not in it.
        mutating func add(_ item: Item, owner: PeerID, first: Bool) {
            let slot: Int
            if let last = self.lastLane, self.lanes[last].owner == owner {
                slot = last
            } else if let existing = self.index[owner] {
                slot = existing
            } else if let free = self.freeLanes.popLast() {
                slot = free
                self.lanes[slot] = Lane(owner: owner)
                self.index[owner] = slot
            } else {
                slot = self.lanes.count
                self.lanes.append(Lane(owner: owner))
                self.index[owner] = slot
            }
            self.lanes[slot].add(item, first: first)
            if !self.lanes[slot].inRing {
                self.lanes[slot].inRing = true
                self.ring.append(slot)
            }
            self.lastLane = slot
        }

        /// The next live item, taking turns between lanes; dead items are discarded on the way.
        mutating func popFirst(count: inout Int, where isLive: (Item) -> Bool) -> Item? {
            while let slot = self.ring.first {
                var found: Item?
                while let item = self.lanes[slot].items.popFirst() {
                    count -= 1
                    if isLive(item) {
                        found = item
                        break
                    }
                }
                if self.lanes[slot].items.isEmpty {
                    self.ring.removeFirst()
                    self.lanes[slot].inRing = false
                    // The lane used last stays for its coordinator's next task (a queue that fills and
                    // drains one task at a time allocates nothing), unless it grew large; others go.
                    if self.lastLane != slot || self.lanes[slot].peak > TaskQueue.keptCapacity {
                        self.index[self.lanes[slot].owner] = nil
                        self.lanes[slot].items = []
                        self.freeLanes.append(slot)
                        if self.lastLane == slot { self.lastLane = nil }
                    }
                    self.lanes[slot].peak = 0
                } else if self.ring.count > 1 {
                    // Its turn is over: the next coordinator's task goes next.
                    self.ring.append(self.ring.removeFirst())
                }
                if let found { return found }
            }
            return nil
        }
    }

    /// The queue's contents: its buckets, highest priority first (usually one), and its counts.
    private struct Store {
        var buckets: [Bucket] = []
        var count = 0
        var live = 0

        mutating func add(_ item: Item, priority: Int32, owner: PeerID, first: Bool) {
            self.buckets[self.bucket(priority)].add(item, owner: owner, first: first)
            self.count += 1
            self.live += 1
        }

        /// The index of the bucket for `priority`, made when there is none.
        private mutating func bucket(_ priority: Int32) -> Int {
            var index = 0
            while index < self.buckets.count, self.buckets[index].priority > priority { index += 1 }
            if index < self.buckets.count, self.buckets[index].priority == priority { return index }
            self.buckets.insert(Bucket(priority: priority), at: index)
            return index
        }

        mutating func popFirst(where isLive: (Item) -> Bool) -> Item? {
            while !self.buckets.isEmpty {
                if let item = self.buckets[0].popFirst(count: &self.count, where: isLive) {
                    self.live -= 1
                    if self.buckets[0].isEmpty, self.buckets.count > 1 { self.buckets.removeFirst() }
                    return item
                }
                // Empty: the last bucket stays, with the lane used last.
                if self.buckets.count == 1 { return nil }
                self.buckets.removeFirst()
            }
            return nil
        }

        func heads(perLane: Int, _ body: (Item) -> Void) {
            for bucket in self.buckets {
                for slot in bucket.ring {
                    for item in bucket.lanes[slot].items.prefix(perLane) { body(item) }
                }
            }
        }
    }
}
