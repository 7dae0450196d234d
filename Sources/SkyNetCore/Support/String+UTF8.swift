extension String {
    /// Calls `body` with the string's UTF-8 bytes where they lie, the string borrowed. `withUTF8` is
    /// mutating: called on a copy of a `let`, the copy was retained and released around it (~60
    /// instructions, for a task's kind or a result's system name, several times a task). A string not
    /// stored as UTF-8 (bridged from Objective-C, never on Linux) is made native first.
    @inlinable @inline(__always)
    package func withUTF8Bytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        if let result = try self.utf8.withContiguousStorageIfAvailable(body) { return result }
        var native = self
        return try native.withUTF8(body)
    }

    /// The longest prefix of at most `limit` UTF-8 bytes that ends where a character's encoding ends
    /// (a wire field's limit never splits a character).
    package func prefix(utf8Bytes limit: Int) -> String {
        guard self.utf8.count > limit else { return self }
        let bytes = Array(self.utf8)
        var cut = limit
        while cut > 0 && bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
        return String(decoding: bytes[..<cut], as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    /// Appends `value` in decimal ASCII, without a `String` in between (a printed result line or a
    /// scan's output on the hot path: `String(value).utf8` cost a conversion and a generic append).
    package mutating func appendDecimal(_ value: Int64) {
        if value < 0 { self.append(UInt8(ascii: "-")) }
        self.appendDecimal(value.magnitude)
    }

    /// ``appendDecimal(_:)-(Int64)`` for an unsigned value.
    package mutating func appendDecimal(_ value: UInt64) {
        var rest = value
        var start = self.count
        repeat {
            self.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        // Reversed in place: `self[start...].reverse()` copied the array (an allocation per call).
        // (Tried: the digits written backwards into a buffer on the stack and appended at once: more
        // instructions, through the generic append.)
        var end = self.count - 1
        while start < end {
            self.swapAt(start, end)
            start += 1
            end -= 1
        }
    }
}

extension UnsafeMutableBufferPointer<UInt8> {
    /// Writes `text`'s UTF-8 bytes at `at` and moves `at` past them; the buffer must have room.
    @inlinable @inline(__always)
    package func write(_ text: StaticString, at: inout Int) {
        text.withUTF8Buffer { bytes in
            precondition(at + bytes.count <= self.count, "no room for \(bytes.count) bytes")
            guard let from = bytes.baseAddress, let to = self.baseAddress else { return }
            (to + at).update(from: from, count: bytes.count)
            at += bytes.count
        }
    }

    /// Writes `bytes` at `at` and moves `at` past them; the buffer must have room.
    @inlinable @inline(__always)
    package func write(_ bytes: UnsafeRawBufferPointer, at: inout Int) {
        precondition(at + bytes.count <= self.count, "no room for \(bytes.count) bytes")
        guard let from = bytes.baseAddress, let to = self.baseAddress else { return }
        UnsafeMutableRawPointer(to + at).copyMemory(from: from, byteCount: bytes.count)
        at += bytes.count
    }

    /// ``writeDecimal(_:at:)-(UInt64,_)`` for a signed value (21 bytes at most).
    @inlinable @inline(__always)
    package func writeDecimal(_ value: Int64, at: inout Int) {
        if value < 0 {
            precondition(at < self.count, "no room for a sign")
            self[at] = UInt8(ascii: "-")
            at += 1
        }
        self.writeDecimal(value.magnitude, at: &at)
    }

    /// Writes `value`'s decimal digits at `at` and moves `at` past them; the buffer must have room
    /// for them (20 bytes at most).
    @inlinable @inline(__always)
    package func writeDecimal(_ value: UInt64, at: inout Int) {
        var digits = 1
        var rest = value / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        precondition(at + digits <= self.count, "no room for \(digits) digits")
        rest = value
        var index = at + digits - 1
        repeat {
            self[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
            index -= 1
        } while rest > 0
        at += digits
    }
}
