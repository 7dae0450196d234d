import DequeModule

/// The queued tasks of one kind: highest priority first, first in first out within a priority.
///
/// Removal is lazy: the queue holds `(id, ticket)` pairs and the broker's task table says whether a
/// ticket is still the live one, so cancelling or expiring a task never scans the queue.
///
/// A class: the broker keeps one per kind in a dictionary and changes it on every submit and dispatch;
/// through a reference that costs a lookup, where a value in the dictionary went through its `modify`
/// accessor (which allocates for a value this size) each time. The last bucket stays when it empties,
/// so a queue that fills and drains one task at a time keeps its storage.
final class TaskQueue {
    struct Item: Equatable {
        let id: TaskID
        let ticket: UInt64
    }

    private struct Bucket {
        let priority: Int32
        var items: Deque<Item>
    }

    /// Highest priority first (usually one).
    private var buckets: [Bucket] = []
    /// Items in the queue, including ones that are no longer live.
    private(set) var count = 0
    /// The most items held since the queue was last empty: storage sized for many is given back.
    private var peak = 0

    var isEmpty: Bool { self.count == 0 }

    func append(_ item: Item, priority: Int32) {
        self.buckets[self.bucket(priority)].items.append(item)
        self.count += 1
        self.peak = max(self.peak, self.count)
    }

    /// Puts a task back at the head of its priority (a requeue after a lost worker goes first).
    func prepend(_ item: Item, priority: Int32) {
        self.buckets[self.bucket(priority)].items.prepend(item)
        self.count += 1
        self.peak = max(self.peak, self.count)
    }

    /// The index of the bucket for `priority`, made when there is none.
    private func bucket(_ priority: Int32) -> Int {
        var index = 0
        while index < self.buckets.count, self.buckets[index].priority > priority { index += 1 }
        if index < self.buckets.count, self.buckets[index].priority == priority { return index }
        if self.buckets.count == 1, self.buckets[0].items.isEmpty {
            // The one bucket left is empty: it takes the new priority and keeps its storage.
            self.buckets[0] = Bucket(priority: priority, items: self.buckets[0].items)
            return 0
        }
        self.buckets.insert(Bucket(priority: priority, items: []), at: index)
        return index
    }

    /// Pops items until `isLive` accepts one; dead items are discarded on the way.
    func popFirst(where isLive: (Item) -> Bool) -> Item? {
        while !self.buckets.isEmpty {
            while let item = self.buckets[0].items.popFirst() {
                self.count -= 1
                if isLive(item) {
                    self.dropFirstBucketIfEmpty()
                    return item
                }
            }
            if self.buckets.count == 1 {
                self.dropFirstBucketIfEmpty()
                return nil
            }
            self.buckets.removeFirst()
        }
        return nil
    }

    private func dropFirstBucketIfEmpty() {
        guard self.buckets[0].items.isEmpty else { return }
        if self.buckets.count > 1 {
            self.buckets.removeFirst()
        } else if self.peak > Self.keptCapacity {
            self.buckets.removeAll()
            self.peak = 0
        }
    }

    /// An emptied queue keeps storage for up to this many items.
    static let keptCapacity = 4096
}
