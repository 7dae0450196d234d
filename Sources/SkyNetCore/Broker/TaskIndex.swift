/// The task table's `TaskID → slot` map: open addressing with linear probing over one array of
/// 24-byte buckets, each an id and its slot side by side.
///
/// Why not a `Dictionary`: the broker looks a task's id up several times over its life (its SUBMIT,
/// its RESULT, its end), mostly long after the last look, so each lookup tends to miss the CPU's
/// caches. A `Dictionary` keeps its occupancy bitmap, keys and values in three separate arrays, so a
/// lookup touches three cache lines; here it is one (a probe that runs on to the next bucket stays
/// on it or the next). In a sampled profile of the deep-credit benchmark the dictionary's `find`
/// was 15% of the broker's reactor thread. It also spends fewer instructions: the key is read once
/// per table, not through a `static let` on every hash, and nothing goes through the generic
/// `Hashable` machinery.
///
/// A bucket whose slot is `UInt32.max` is empty (the table never has that many tasks). Deletion
/// shifts the buckets after it back, so there are no tombstones and a lookup stops at the first
/// empty bucket. The table grows to keep at most half its buckets full. Hashing is ``FastHash``,
/// keyed per process: a peer cannot choose ids that pile up in one run of buckets.
package struct TaskIndex {
    private struct Bucket {
        var high: UInt64
        var low: UInt64
        var slot: UInt32
    }

    private static let empty = Bucket(high: 0, low: 0, slot: .max)
    /// The fewest buckets a table with anything in it has.
    static let minimumCapacity = 16

    private var buckets: [Bucket] = []
    /// Buckets − 1 (buckets are a power of two); 0 while there are none.
    private var mask = 0
    /// The ids mapped.
    package private(set) var count = 0
    /// The hash's key: the process's, mixed with a constant of this table's own.
    private let key = FastHash.key ^ 0x5851_F42D_4C95_7F2D

    package init() {}

    package var isEmpty: Bool { self.count == 0 }

    /// The bucket `id` starts its search at.
    @inline(__always)
    private func home(_ id: TaskID) -> Int {
        FastHash.hash(id.high, id.low, key: self.key) & self.mask
    }

    /// The slot of `id`, if it is mapped.
    package func slot(of id: TaskID) -> UInt32? {
        guard self.count > 0 else { return nil }
        return self.buckets.withUnsafeBufferPointer { buckets in
            var index = self.home(id)
            while true {
                let bucket = buckets[index]
                if bucket.slot == .max { return nil }
                if bucket.high == id.high && bucket.low == id.low { return bucket.slot }
                index = (index + 1) & self.mask
            }
        }
    }

    /// Maps `id` to `slot`, replacing what it was mapped to.
    package mutating func set(_ id: TaskID, to slot: UInt32) {
        precondition(slot != .max, "slot \(slot) is the empty marker")
        if (self.count + 1) * 2 > self.buckets.count { self.grow() }
        let mask = self.mask
        var index = self.home(id)
        let added = self.buckets.withUnsafeMutableBufferPointer { buckets -> Bool in
            while true {
                if buckets[index].slot == .max {
                    buckets[index] = Bucket(high: id.high, low: id.low, slot: slot)
                    return true
                }
                if buckets[index].high == id.high && buckets[index].low == id.low {
                    buckets[index].slot = slot
                    return false
                }
                index = (index + 1) & mask
            }
        }
        if added { self.count += 1 }
    }

    /// Unmaps `id`; returns the slot it was mapped to.
    @discardableResult
    package mutating func remove(_ id: TaskID) -> UInt32? {
        guard self.count > 0 else { return nil }
        let mask = self.mask
        var hole = self.home(id)
        let key = self.key
        let removed = self.buckets.withUnsafeMutableBufferPointer { buckets -> UInt32? in
            while true {
                let bucket = buckets[hole]
                if bucket.slot == .max { return nil }
                if bucket.high == id.high && bucket.low == id.low { break }
                hole = (hole + 1) & mask
            }
            let slot = buckets[hole].slot
            // Shift back each following bucket that may move into the hole (its home is not between
            // the hole and it), until an empty bucket ends the run.
            var next = (hole + 1) & mask
            while buckets[next].slot != .max {
                let home = FastHash.hash(buckets[next].high, buckets[next].low, key: key) & mask
                if (next &- home) & mask >= (next &- hole) & mask {
                    buckets[hole] = buckets[next]
                    hole = next
                }
                next = (next + 1) & mask
            }
            buckets[hole] = Self.empty
            return slot
        }
        if removed != nil { self.count -= 1 }
        return removed
    }

    /// Unmaps every id; keeps the storage only when `keepingCapacity` (and it is not large).
    package mutating func removeAll(keepingCapacity: Bool) {
        if keepingCapacity {
            // With nothing mapped every bucket is empty already (a removal empties its bucket).
            if self.count > 0 {
                for index in self.buckets.indices { self.buckets[index] = Self.empty }
            }
        } else {
            self.buckets = []
            self.mask = 0
        }
        self.count = 0
    }

    /// Doubles the buckets (or makes the first ones) and maps every id again. A broker that takes a
    /// whole job grows its table to it (200,000 tasks: fourteen times), so this moves each bucket to
    /// the first empty one from its new home without ``set(_:to:)``'s checks: every id is there once,
    /// and nothing else is in the new table (through `set`, ~100 instructions a task of a deep job).
    private mutating func grow() {
        let capacity = max(Self.minimumCapacity, self.buckets.count * 2)
        let mask = capacity - 1
        let key = self.key
        var grown = [Bucket](repeating: Self.empty, count: capacity)
        grown.withUnsafeMutableBufferPointer { grown in
            self.buckets.withUnsafeBufferPointer { old in
                for bucket in old where bucket.slot != .max {
                    var index = FastHash.hash(bucket.high, bucket.low, key: key) & mask
                    while grown[index].slot != .max { index = (index + 1) & mask }
                    grown[index] = bucket
                }
            }
        }
        self.buckets = grown
        self.mask = mask
    }
}
