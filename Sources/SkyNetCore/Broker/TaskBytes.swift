/// A task's input as the broker keeps it until the task ends: up to ``inlineCapacity`` bytes held
/// in place, without an allocation (a sector task's input is 20 or 21 bytes), anything longer in an
/// array. A SUBMIT's input is copied here straight from the received frame (``init(_:)-(UnsafeRawBufferPointer)``),
/// so a small task costs the broker no allocation from SUBMIT to RESULT.
///
/// 24 bytes, as the `[UInt8]` it replaces plus 16: 23 bytes of payload (22 of input and the count)
/// and the case's tag. The task entry grows by those 16 bytes; a task with a small input saves the
/// 64-byte heap block its array had.
package enum TaskBytes: Sendable, Equatable, ExpressibleByArrayLiteral {
    /// Up to 22 bytes in place; `count` says how many.
    case inline(Inline)
    /// More than ``inlineCapacity`` bytes.
    case heap([UInt8])

    /// 23 bytes: two words, a half, a quarter word, then the count (no padding, so the enum's tag
    /// takes the 24th byte).
    package struct Inline: Sendable {
        var words: (UInt64, UInt64, UInt32, UInt16) = (0, 0, 0, 0)
        var count: UInt8 = 0
    }

    /// The most bytes held in place.
    package static let inlineCapacity = 22

    /// Copies `bytes` (read in place, e.g. from a received frame).
    package init(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count <= Self.inlineCapacity else {
            self = .heap(Array(bytes))
            return
        }
        var inline = Inline()
        if let base = bytes.baseAddress, !bytes.isEmpty {
            withUnsafeMutableBytes(of: &inline.words) { $0.baseAddress!.copyMemory(from: base, byteCount: bytes.count) }
        }
        inline.count = UInt8(bytes.count)
        self = .inline(inline)
    }

    /// `bytes`, held in place when they fit (the array is then let go), else the array itself.
    package init(_ bytes: [UInt8]) {
        guard bytes.count > Self.inlineCapacity else {
            self = bytes.withUnsafeBytes { TaskBytes($0) }
            return
        }
        self = .heap(bytes)
    }

    package init(arrayLiteral elements: UInt8...) { self.init(elements) }

    package var count: Int {
        switch self {
        case .inline(let inline): Int(inline.count)
        case .heap(let heap): heap.count
        }
    }

    package var isEmpty: Bool { self.count == 0 }

    /// Calls `body` with the bytes, read in place (valid only during the call).
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch self {
        case .inline(let inline):
            let count = Int(inline.count)
            return try Swift.withUnsafeBytes(of: inline.words) {
                try body(UnsafeRawBufferPointer(rebasing: $0[..<count]))
            }
        case .heap(let heap):
            return try heap.withUnsafeBytes(body)
        }
    }

    /// The bytes as an array (made for an inline input: for the journal, a snapshot, a large send).
    package var array: [UInt8] {
        switch self {
        case .inline: self.withUnsafeBytes { Array($0) }
        case .heap(let heap): heap
        }
    }

    package static func == (lhs: TaskBytes, rhs: TaskBytes) -> Bool {
        lhs.count == rhs.count && lhs.withUnsafeBytes { left in rhs.withUnsafeBytes { left.elementsEqual($0) } }
    }
}
