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

@Suite("Routing ids (PeerID)")
struct PeerIDTests {
    /// Ids of every length and of each form: as they are (≤ 16 bytes), SkyNet's (32), a job's (17,
    /// a zero first) and long ones, with near misses of the compact forms.
    static func samples() -> [[UInt8]] {
        var generator = SystemRandomNumberGenerator()
        func random(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) } }
        var samples = (0...255).map { random($0) }
        samples += (0..<50).flatMap { _ in [PeerID.unique(prefix: "w").bytes, PeerID.unique(prefix: "c").bytes] }
        samples += (0..<20).map { _ in [0] + TaskID.random().bytes }
        samples += (0..<20).map { _ in [1] + TaskID.random().bytes }
        samples += [[0] + [UInt8](repeating: 0, count: 16), [0] + [UInt8](repeating: 0xFF, count: 16)]
        samples += [
            Array("w-\(String(repeating: "0", count: 30))".utf8), Array("w-\(String(repeating: "f", count: 30))".utf8),
        ]
        let skynet = PeerID.unique(prefix: "w").bytes
        for index in 2..<32 {
            for char in ["g", "A", "F", "/", ":", "`"] {
                var near = skynet
                near[index] = UInt8(ascii: Unicode.Scalar(char)!)
                samples.append(near)
            }
        }
        var noDash = skynet
        noDash[1] = UInt8(ascii: "_")
        samples += [noDash, Array(skynet.dropLast()), skynet + [UInt8(ascii: "0")], [0] + skynet.dropFirst(16)]
        return samples
    }

    @Test("SkyNet's ids are spelled eight hex digits at a time, as a byte at a time would")
    func hexDigits() {
        var values: [UInt32] = [0, 1, 9, 10, 15, 16, 0x9A9A_9A9A, 0xFFFF_FFFF, 0x0123_4567, 0x89AB_CDEF]
        values += (0..<2_000).map { _ in UInt32.random(in: 0...UInt32.max) }
        for value in values {
            let expected = (0..<4).map { String(UInt8(truncatingIfNeeded: value >> (8 * $0)), radix: 16) }
                .map { $0.count == 1 ? "0" + $0 : $0 }.joined()
            let digits = withUnsafeBytes(of: PeerID.hexDigits(value)) { String(decoding: $0, as: UTF8.self) }
            #expect(digits == expected, "\(value)")
        }
    }

    @Test(
        "every form keeps its bytes; equal bytes are equal ids, however made; a changed byte or a trailing zero is another id"
    )
    func forms() throws {
        let samples = Self.samples()
        var seen: [PeerID: [UInt8]] = [:]
        for bytes in samples {
            let id = PeerID(bytes)
            #expect(id.bytes == bytes)
            #expect(id.first == bytes.first)
            let received = bytes.withUnsafeBytes { PeerID(received: $0) }
            #expect(received == id && received?._rawHashValue(seed: 5) == id._rawHashValue(seed: 5))
            #expect(id.withUnsafeBytes { Array($0) } == bytes)
            // Spelled into a buffer that held other bytes (the outbox's, on its stack): the same bytes,
            // or nil for an id kept in the table.
            var buffer = [UInt8](repeating: 0xAB, count: PeerID.compactMaxCount)
            let spelled = buffer.withUnsafeMutableBytes { raw in id.write(compactInto: raw).map { Array(raw[..<$0]) } }
            #expect(spelled == (id.isInLongIDTable ? nil : bytes), "\(bytes)")
            if bytes.count < 255 {
                #expect(PeerID(bytes + [0]) != id, "a trailing zero after \(bytes)")
                #expect(PeerID(bytes + [0])._rawHashValue(seed: 5) != id._rawHashValue(seed: 5))
            }
            for index in Set([0, 1, bytes.count / 2, bytes.count - 1]) where index >= 0 && index < bytes.count {
                var other = bytes
                other[index] ^= 0x01
                #expect(PeerID(other) != id, "byte \(index) of \(bytes) changed")
            }
            if let earlier = seen[id] { #expect(earlier == bytes, "two byte strings, one id") }
            seen[id] = bytes
        }
        #expect(seen.count == Set(samples).count)
        for (id, bytes) in seen { #expect(PeerID(bytes) == id && seen[PeerID(bytes)] == bytes) }
        // SkyNet's ids, libzmq's and a job's need no table. (Asked of each id: the table's count is
        // the process's, and a test running beside this one once added two ids to it meanwhile.)
        for _ in 0..<1000 {
            for id in [PeerID.unique(prefix: "c"), PeerID([0] + TaskID.random().bytes), PeerID([0, 1, 2, 3, 4])] {
                #expect(!id.isInLongIDTable, "\(id.bytes) in the table")
            }
        }
        let long = PeerID(Array(repeating: 7, count: 40))
        #expect(long.isInLongIDTable && long.bytes == Array(repeating: 7, count: 40))
        // A job's pseudo-peer is a zero byte and the job's id, and gives the id back; no other id does.
        for id in [TaskID.random(), TaskID(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10), .zero] {
            #expect(PeerID.job(id).bytes == [0] + id.bytes)
            #expect(PeerID.job(id) == PeerID([0] + id.bytes) && PeerID.job(id).job == id)
        }
        #expect(samples.allSatisfy { ($0.count == 17 && $0[0] == 0) == (PeerID($0).job != nil) })
        // More than ZeroMQ allows is no routing id: refused, and a journal record holding one does
        // not decode.
        #expect([UInt8](repeating: 7, count: 256).withUnsafeBytes { PeerID(received: $0) } == nil)
        let record = JournalRecord.submit(
            TaskID.random(),
            coordinator: PeerID(Array(repeating: UInt8(ascii: "c"), count: 255)),
            attempt: 1,
            TaskEnvelope(kind: "k"),
            input: []
        )
        var framed = record.framed()
        #expect(try JournalRecord.decode(framed[8...]) == record)
        // The coordinator's length (u32 after the kind byte and the id) made 256, its last byte doubled.
        framed.insert(UInt8(ascii: "c"), at: 8 + 17 + 4)
        framed[8 + 17] = 0
        framed[8 + 18] = 1
        #expect(throws: ProtocolError.self) { try JournalRecord.decode(framed[8...]) }
        // Text for printable ids, hex for the others.
        #expect(PeerID(Array("w-0123".utf8)).description == "w-0123")
        #expect(PeerID([0, 0xAB, 1]).description == "0x00ab01")
        #expect(PeerID(Array(repeating: UInt8(ascii: "x"), count: 40)).description == String(repeating: "x", count: 40))
        #expect(MemoryLayout<PeerID>.size == 17 && _isPOD(PeerID.self))
    }
}

@Suite("The table of long routing ids")
struct LongIDTableTests {
    @Test(
        "ids are numbered in the order first seen and keep their number; past the limit a new one gets none, known ones still do"
    )
    func limit() {
        var table = LongIDTable(limit: 3)
        let ids = (0..<5).map { [UInt8](repeating: UInt8($0), count: 20 + $0) }
        #expect(ids.prefix(3).map { table.number(of: $0) } == [0, 1, 2])
        #expect(table.number(of: ids[3]) == nil && table.number(of: ids[4]) == nil && table.count == 3)
        #expect(ids.prefix(3).map { table.number(of: $0) } == [0, 1, 2])
        #expect((0..<3).map { table.bytes(of: $0) } == Array(ids.prefix(3)))
    }
}

@Suite("Recent senders' routing ids")
struct RecentPeersTests {
    @Test(
        "a sender's id is the id of its bytes, first time and again, for more senders than are kept and ids of every form"
    )
    func recent() {
        var recent = RecentPeers()
        let samples = PeerIDTests.samples()
        for round in 0..<3 {
            for bytes in samples {
                let id = bytes.withUnsafeBytes { recent.peer($0) }
                #expect(id == PeerID(bytes) && id?.bytes == bytes, "round \(round), \(bytes.count) bytes")
            }
            // A few senders again and again (the kept ones), interleaved with near misses.
            for bytes in samples.prefix(RecentPeers.capacity / 2) {
                var near = bytes + [0]
                #expect(bytes.withUnsafeBytes { recent.peer($0) } == PeerID(bytes))
                #expect(near.withUnsafeBytes { recent.peer($0) } == PeerID(near))
                near[0] ^= 1
                #expect(near.withUnsafeBytes { recent.peer($0) } == PeerID(near))
            }
        }
        #expect([UInt8](repeating: 1, count: 300).withUnsafeBytes { recent.peer($0) } == nil)
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
