import Testing

@testable import SkyNetCore

@Suite("Keyed hashing of ids (FastHash)")
struct FastHashTests {
    @Test("equal ids hash alike, and random ids spread over the hash values")
    func spread() {
        var generator = SystemRandomNumberGenerator()
        let ids = (0..<100_000).map { _ in TaskID.random(using: &generator) }
        for id in ids.prefix(100) {
            #expect(id._rawHashValue(seed: 7) == TaskID(high: id.high, low: id.low)._rawHashValue(seed: 7))
        }
        // 100,000 random 64-bit values would almost never collide; neither should their hashes, and the
        // low bits (a table's bucket) must be spread too.
        let hashes = ids.map { $0._rawHashValue(seed: 42) }
        #expect(Set(hashes).count >= 99_990)
        var buckets = [Int](repeating: 0, count: 1024)
        for hash in hashes { buckets[hash & 1023] += 1 }
        #expect(buckets.max()! < 200 && buckets.min()! > 30, "bucket loads \(buckets.min()!)...\(buckets.max()!)")
        // Sequential ids (a client that counts) spread as well.
        let sequential = (0..<20_000).map { TaskID(high: 0, low: UInt64($0))._rawHashValue(seed: 1) & 1023 }
        #expect(Set(sequential).count == 1024)
        // The table's seed changes the hash.
        #expect(ids[0]._rawHashValue(seed: 1) != ids[0]._rawHashValue(seed: 2))
    }

    @Test("routing ids hash by every byte and by their length; tables of ids work")
    func peers() {
        let a = PeerID(Array("c-0123456789abcdef0123456789abcd".utf8))
        var b = a.bytes
        b[31] ^= 1
        #expect(a._rawHashValue(seed: 3) == PeerID(a.bytes)._rawHashValue(seed: 3))
        #expect(a._rawHashValue(seed: 3) != PeerID(b)._rawHashValue(seed: 3))
        #expect(PeerID([1])._rawHashValue(seed: 3) != PeerID([1, 0])._rawHashValue(seed: 3))
        #expect(PeerID([])._rawHashValue(seed: 3) == PeerID([])._rawHashValue(seed: 3))
        var table: [PeerID: Int] = [:]
        for index in 0..<5_000 { table[PeerID(Array("w-\(index)".utf8))] = index }
        #expect(table.count == 5_000)
        let found = (0..<5_000).filter { (index: Int) in table[PeerID(Array("w-\(index)".utf8))] == index }
        #expect(found.count == 5_000)
        var tasks = Set<TaskID>()
        for low in 0..<5_000 { tasks.insert(TaskID(high: 9, low: UInt64(low))) }
        #expect(tasks.count == 5_000 && tasks.contains(TaskID(high: 9, low: 4_999)) && !tasks.contains(.zero))
    }
}

@Suite("Task ids as text")
struct TaskIDTextTests {
    @Test("the text is the 8-4-4-4-12 lowercase hex of the two halves, and parses back")
    func text() {
        var generator = SystemRandomNumberGenerator()
        func hex(_ value: UInt64, _ digits: Int) -> String {
            let text = String(value, radix: 16)
            return String(repeating: "0", count: digits - text.count) + text
        }
        var ids = [
            TaskID.zero, TaskID(high: .max, low: .max), TaskID(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210),
        ]
        for _ in 0..<2000 { ids.append(TaskID(high: generator.next(), low: generator.next())) }
        for id in ids {
            let high = hex(id.high, 16)
            let low = hex(id.low, 16)
            let expected =
                "\(high.prefix(8))-\(high.dropFirst(8).prefix(4))-\(high.suffix(4))-\(low.prefix(4))-\(low.suffix(12))"
            #expect(id.description == expected)
            #expect(TaskID(id.description) == id)
        }
    }
}
