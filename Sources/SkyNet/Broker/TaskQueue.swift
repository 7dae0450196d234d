import DequeModule

/// The queued tasks of one kind: highest priority first, first in first out within a priority.
///
/// Removal is lazy: the queue holds `(id, ticket)` pairs and the broker's task table says whether a
/// ticket is still the live one, so cancelling or expiring a task never scans the queue.
struct TaskQueue {
    struct Item: Equatable {
        let id: TaskID
        let ticket: UInt64
    }

    private var buckets: [Int32: Deque<Item>] = [:]
    /// Priorities with a bucket, highest first.
    private var priorities: [Int32] = []
    /// Items in the queue, including ones that are no longer live.
    private(set) var count = 0

    var isEmpty: Bool { self.count == 0 }

    mutating func append(_ item: Item, priority: Int32) {
        self.ensureBucket(priority)
        self.buckets[priority]!.append(item)
        self.count += 1
    }

    /// Puts a task back at the head of its priority (a requeue after a lost worker goes first).
    mutating func prepend(_ item: Item, priority: Int32) {
        self.ensureBucket(priority)
        self.buckets[priority]!.prepend(item)
        self.count += 1
    }

    private mutating func ensureBucket(_ priority: Int32) {
        guard self.buckets[priority] == nil else { return }
        self.buckets[priority] = []
        let index = self.priorities.firstIndex(where: { $0 < priority }) ?? self.priorities.endIndex
        self.priorities.insert(priority, at: index)
    }

    /// Pops items until `isLive` accepts one; dead items are discarded on the way.
    mutating func popFirst(where isLive: (Item) -> Bool) -> Item? {
        while let priority = self.priorities.first {
            while let item = self.buckets[priority]?.popFirst() {
                self.count -= 1
                if isLive(item) {
                    if self.buckets[priority]?.isEmpty == true { self.dropBucket(priority) }
                    return item
                }
            }
            self.dropBucket(priority)
        }
        return nil
    }

    private mutating func dropBucket(_ priority: Int32) {
        self.buckets[priority] = nil
        self.priorities.removeAll { $0 == priority }
    }
}
