import Testing

@testable import SkyNetCore

@Suite("GrowableBytes (a BATCH writer's storage)")
struct GrowableBytesTests {
    @Test("appends grow it with what was there kept; a copy keeps its bytes when the other changes")
    func appendsAndCopies() {
        var bytes = GrowableBytes()
        #expect(bytes.count == 0 && bytes.capacity == 0 && bytes.array.isEmpty)
        var expected: [UInt8] = []
        var generator = SystemRandomNumberGenerator()
        // Across several growths (from 256 bytes, doubling), in pieces of every kind.
        for round in 0..<300 {
            let piece = (0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 0...255) }
            piece.withUnsafeBytes { bytes.append($0) }
            bytes.append(UInt8(truncatingIfNeeded: round))
            bytes.appendUInt32(UInt32(round) &* 0x0102_0304)
            expected += piece + [UInt8(truncatingIfNeeded: round)]
            withUnsafeBytes(of: (UInt32(round) &* 0x0102_0304).littleEndian) { expected += $0 }
        }
        #expect(bytes.count == expected.count && bytes.capacity >= expected.count)
        #expect(bytes.array == expected)
        bytes.withUnsafeBytes { #expect(Array($0) == expected) }
        // A copy shares the storage until one of them changes.
        var copy = bytes
        copy.append(7)
        #expect(bytes.array == expected && copy.array == expected + [7])
        bytes.removeAll(keepingCapacityUpTo: .max)
        #expect(bytes.count == 0 && copy.array == expected + [7])
        // Written in place: exactly the bytes asked for.
        copy.write(count: 3) { $0.copyMemory(from: [1, 2, 3] as [UInt8], byteCount: 3) }
        #expect(copy.array == expected + [7, 1, 2, 3])
    }

    @Test("emptied, it keeps its storage up to the limit and lets a larger one go")
    func removeAll() {
        var bytes = GrowableBytes()
        [UInt8](repeating: 1, count: 1000).withUnsafeBytes { bytes.append($0) }
        let capacity = bytes.capacity
        #expect(capacity >= 1000)
        bytes.removeAll(keepingCapacityUpTo: capacity)
        #expect(bytes.count == 0 && bytes.capacity == capacity)
        bytes.append(9)
        #expect(bytes.array == [9] && bytes.capacity == capacity)
        bytes.removeAll(keepingCapacityUpTo: capacity - 1)
        #expect(bytes.count == 0 && bytes.capacity == 0)
        bytes.withUnsafeBytes { #expect($0.isEmpty) }
        // Shared storage is not emptied under the other copy: this copy lets it go instead.
        bytes.append(5)
        let other = bytes
        bytes.removeAll(keepingCapacityUpTo: .max)
        #expect(bytes.count == 0 && other.array == [5])
    }
}
