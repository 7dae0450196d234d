import SkyNetCore
/// Keeps at most `limit` bytes of a stream: all of it when it fits, else its first `limit / 2` bytes
/// and its last `limit - limit / 2` (so a long log shows how it began and how it ended).
struct HeadTail: Sendable {
    let limit: Int
    private(set) var head: [UInt8] = []
    /// The tail, as a ring once it is full: `tail[tailStart...] + tail[..<tailStart]`.
    private var tail: [UInt8] = []
    private var tailStart = 0
    /// Bytes seen in all.
    private(set) var total = 0

    init(limit: Int) { self.limit = max(0, limit) }

    private var headLimit: Int { self.limit / 2 }
    private var tailLimit: Int { self.limit - self.limit / 2 }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        self.total += bytes.count
        var rest = bytes[...]
        let headRoom = self.headLimit - self.head.count
        if headRoom > 0 {
            self.head.append(contentsOf: rest.prefix(headRoom))
            rest = rest.dropFirst(headRoom)
        }
        guard !rest.isEmpty, self.tailLimit > 0 else { return }
        if rest.count >= self.tailLimit {
            self.tail = Array(rest.suffix(self.tailLimit))
            self.tailStart = 0
            return
        }
        for byte in rest {
            if self.tail.count < self.tailLimit {
                self.tail.append(byte)
            } else {
                self.tail[self.tailStart] = byte
                self.tailStart = (self.tailStart + 1) % self.tailLimit
            }
        }
    }

    mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { self.append($0) }
    }

    /// What was kept, in stream order (head, then tail).
    var bytes: [UInt8] {
        self.head + self.tail[self.tailStart...] + self.tail[..<self.tailStart]
    }
}
