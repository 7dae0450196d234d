/// The routing ids of the last few senders on a ROUTER, with the bytes they arrived as, so that a
/// message from a recent sender costs a comparison of four words instead of reading its id again
/// (``PeerID/init(received:)`` converts SkyNet's 30 hex digits, and looks a long id up in a table
/// under a lock). Ids over 32 bytes are read every time.
package struct RecentPeers {
    private struct Entry {
        var words: (UInt64, UInt64, UInt64, UInt64)
        var count: Int
        var id: PeerID
    }

    /// How many senders are remembered.
    package static let capacity = 16

    private var entries: [Entry] = []
    /// The entry replaced next once all are taken.
    private var next = 0

    package init() {}

    /// The id of a sender whose routing-id frame is `raw` (nil as for ``PeerID/init(received:)``).
    package mutating func peer(_ raw: UnsafeRawBufferPointer) -> PeerID? {
        guard raw.count <= 32 else { return PeerID(received: raw) }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: raw) }
        let count = raw.count
        let known = self.entries.withUnsafeBufferPointer { entries -> PeerID? in
            for entry in entries where entry.count == count && entry.words == words { return entry.id }
            return nil
        }
        if let known { return known }
        guard let id = PeerID(received: raw) else { return nil }
        let entry = Entry(words: words, count: count, id: id)
        if self.entries.count < Self.capacity {
            self.entries.append(entry)
        } else {
            self.entries[self.next] = entry
            self.next = (self.next + 1) % Self.capacity
        }
        return id
    }
}
