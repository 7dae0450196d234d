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
package final class TaskQueue {
    /// The kind's figures (the queue records each dispatched task's wait there).
    package let figures: KindFigures
    /// Live items: queued tasks of the kind (``count`` also holds dead ones until they are popped).
    package private(set) var live = 0

    package init(figures: KindFigures) { self.figures = figures }

    package struct Item: Equatable {
        package let id: TaskID
        package let ticket: UInt64
    }

    /// One coordinator's tasks at one priority. A class, changed in place through the ring and the
    /// index alike.
    private final class Lane {
        package let owner: PeerID
        package var items: Deque<Item> = []
        /// In the bucket's ring (it has items, or had and its turn has not come).
        package var inRing = false
        /// The most items held since the lane was last empty: storage sized for many is given back.
        package var peak = 0

        package init(owner: PeerID) { self.owner = owner }

        package func add(_ item: Item, first: Bool) {
            if first { self.items.prepend(item) } else { self.items.append(item) }
            self.peak = max(self.peak, self.items.count)
        }
    }

    /// One priority's lanes: `ring` in turn order (its first lane gives the next task, then goes to
    /// the back), `lanes` to find a coordinator's lane when it is not the one used last.
    private final class Bucket {
        package let priority: Int32
        package var ring: Deque<Lane> = []
        package var lanes: [PeerID: Lane] = [:]
        /// The lane appended to last: a burst of SUBMITs from one coordinator finds it without hashing.
        package var lastLane: Lane?

        package init(priority: Int32) { self.priority = priority }

        package var isEmpty: Bool { self.ring.isEmpty }

        /// `owner`'s lane, in the ring.
        package func lane(_ owner: PeerID) -> Lane {
            let lane: Lane
            if let last = self.lastLane, last.owner == owner {
                lane = last
            } else if let existing = self.lanes[owner] {
                lane = existing
            } else {
                lane = Lane(owner: owner)
                self.lanes[owner] = lane
            }
            if !lane.inRing {
                lane.inRing = true
                self.ring.append(lane)
            }
            self.lastLane = lane
            return lane
        }

        /// The next live item, taking turns between lanes; dead items are discarded on the way.
        package func popFirst(count: inout Int, where isLive: (Item) -> Bool) -> Item? {
            while let lane = self.ring.first {
                var found: Item?
                while let item = lane.items.popFirst() {
                    count -= 1
                    if isLive(item) {
                        found = item
                        break
                    }
                }
                if lane.items.isEmpty {
                    self.ring.removeFirst()
                    lane.inRing = false
                    // The lane used last stays for its coordinator's next task (a queue that fills and
                    // drains one task at a time allocates nothing), unless it grew large; others go.
                    if self.lastLane !== lane || lane.peak > TaskQueue.keptCapacity {
                        self.lanes[lane.owner] = nil
                        if self.lastLane === lane { self.lastLane = nil }
                    }
                    lane.peak = 0
                } else if self.ring.count > 1 {
                    // Its turn is over: the next coordinator's task goes next.
                    self.ring.append(self.ring.removeFirst())
                }
                if let found { return found }
            }
            return nil
        }
    }

    /// Highest priority first (usually one).
    private var buckets: [Bucket] = []
    /// Items in the queue, including ones that are no longer live.
    package private(set) var count = 0

    package var isEmpty: Bool { self.count == 0 }

    /// Queues a task of `owner` at the back of its lane.
    package func append(_ item: Item, priority: Int32, owner: PeerID) {
        self.bucket(priority).lane(owner).add(item, first: false)
        self.count += 1
        self.live += 1
    }

    /// Puts a task back at the head of its lane (a requeue after a lost worker goes first).
    package func prepend(_ item: Item, priority: Int32, owner: PeerID) {
        self.bucket(priority).lane(owner).add(item, first: true)
        self.count += 1
        self.live += 1
    }

    /// A queued task was removed from the table (cancelled, its coordinator lost): its item is dead.
    package func forget() { self.live -= 1 }

    /// Calls `body` with the first `perLane` items of every lane (live or not): the next tasks of each
    /// coordinator, among them the oldest queued (a lane is first in, first out but for requeues).
    package func heads(perLane: Int, _ body: (Item) -> Void) {
        for bucket in self.buckets {
            for lane in bucket.ring {
                for item in lane.items.prefix(perLane) { body(item) }
            }
        }
    }

    /// The bucket for `priority`, made when there is none.
    private func bucket(_ priority: Int32) -> Bucket {
        if let first = self.buckets.first, first.priority == priority { return first }
        var index = 0
        while index < self.buckets.count, self.buckets[index].priority > priority { index += 1 }
        if index < self.buckets.count, self.buckets[index].priority == priority { return self.buckets[index] }
        let bucket = Bucket(priority: priority)
        self.buckets.insert(bucket, at: index)
        return bucket
    }

    /// Pops items until `isLive` accepts one; dead items are discarded on the way.
    package func popFirst(where isLive: (Item) -> Bool) -> Item? {
        while let first = self.buckets.first {
            if let item = first.popFirst(count: &self.count, where: isLive) {
                self.live -= 1
                if first.isEmpty, self.buckets.count > 1 { self.buckets.removeFirst() }
                return item
            }
            // Empty: the last bucket stays, with the lane used last.
            if self.buckets.count == 1 { return nil }
            self.buckets.removeFirst()
        }
        return nil
    }

    /// An emptied lane keeps storage for up to this many items.
    package static let keptCapacity = 4096
}
