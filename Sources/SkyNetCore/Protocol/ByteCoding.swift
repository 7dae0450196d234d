import Glibc

/// Appends little-endian values and length-prefixed strings to a byte array.
package struct ByteWriter {
    package var bytes: [UInt8] = []

    package init(capacity: Int = 32) { self.bytes.reserveCapacity(capacity) }

    /// A writer with no storage of its own (``appending(to:_:)`` swaps the caller's in): reserving
    /// even 0 bytes allocated a buffer, for every SUBMIT and TASK written.
    private init() {}

    package mutating func u8(_ value: UInt8) { self.bytes.append(value) }
    package mutating func u16(_ value: UInt16) { self.int(value) }
    package mutating func u32(_ value: UInt32) { self.int(value) }
    package mutating func u64(_ value: UInt64) { self.int(value) }
    package mutating func i32(_ value: Int32) { self.int(UInt32(bitPattern: value)) }
    package mutating func i64(_ value: Int64) { self.int(UInt64(bitPattern: value)) }
    package mutating func u64BigEndian(_ value: UInt64) {
        var v = value.bigEndian
        withUnsafeBytes(of: &v) { self.bytes.append(contentsOf: $0) }
    }

    private mutating func int<T: FixedWidthInteger>(_ value: T) {
        var v = value.littleEndian
        withUnsafeBytes(of: &v) { self.bytes.append(contentsOf: $0) }
    }

    /// Runs `body` with a writer that appends to `bytes` in place (no copy of what is there).
    package static func appending(to bytes: inout [UInt8], _ body: (inout ByteWriter) -> Void) {
        var writer = ByteWriter()
        swap(&writer.bytes, &bytes)
        body(&writer)
        swap(&writer.bytes, &bytes)
    }

    /// A new array of about `capacity` bytes that `write` fills.
    package static func bytes(capacity: Int, _ write: (inout [UInt8]) -> Void) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(capacity)
        write(&bytes)
        return bytes
    }

    /// Bytes with a u32 length prefix.
    package mutating func blob(_ value: [UInt8]) {
        value.withUnsafeBytes { self.blob($0) }
    }

    /// Borrowed bytes with a u32 length prefix.
    package mutating func blob(_ value: UnsafeRawBufferPointer) {
        self.u32(UInt32(value.count))
        self.bytes.append(contentsOf: value)
    }

    /// A string with a u16 length prefix; callers validate the length first.
    package mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            let count = min(utf8.count, Int(UInt16.max))
            self.u16(UInt16(count))
            self.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8.prefix(count)))
        }
    }
}

/// Reads little-endian values from bytes, checking every length; never traps on bad input. Generic
/// over where the bytes are: an array, or a frame read in place (`UnsafeRawBufferPointer`).
package struct ByteReader<Bytes: RandomAccessCollection<UInt8>> where Bytes.Index == Int {
    private let bytes: Bytes
    private var offset: Int
    /// What is read, for errors: a `StaticString`, so that making and dropping a reader retains and
    /// releases nothing (a `String` cost ~60 instructions a decode, on a worker's every sector scan).
    package let what: StaticString

    package init(_ bytes: Bytes, what: StaticString) {
        self.bytes = bytes
        self.offset = bytes.startIndex
        self.what = what
    }

    package var remaining: Int { self.bytes.endIndex - self.offset }

    package mutating func u8() throws(ProtocolError) -> UInt8 { try self.int() }
    package mutating func u16() throws(ProtocolError) -> UInt16 { try self.int() }
    package mutating func u32() throws(ProtocolError) -> UInt32 { try self.int() }
    package mutating func u64() throws(ProtocolError) -> UInt64 { try self.int() }
    package mutating func i32() throws(ProtocolError) -> Int32 { Int32(bitPattern: try self.int()) }
    package mutating func i64() throws(ProtocolError) -> Int64 { Int64(bitPattern: try self.int()) }

    private mutating func int<T: FixedWidthInteger>() throws(ProtocolError) -> T {
        let size = MemoryLayout<T>.size
        guard self.remaining >= size else {
            throw ProtocolError(.badLength, "\(self.what) is truncated at byte \(self.offset - self.bytes.startIndex)")
        }
        let start = self.offset - self.bytes.startIndex
        self.offset += size
        // One unaligned load where the bytes are contiguous (arrays, frames): the length is checked
        // above. A byte at a time otherwise.
        if let loaded = self.bytes.withContiguousStorageIfAvailable({ buffer in
            UnsafeRawBufferPointer(buffer).loadUnaligned(fromByteOffset: start, as: T.self)
        }) {
            return T(littleEndian: loaded)
        }
        var value: T = 0
        for i in 0..<size { value |= T(self.bytes[self.bytes.startIndex + start + i]) << (8 * i) }
        return value
    }

    package mutating func take(_ count: Int) throws(ProtocolError) -> Bytes.SubSequence {
        guard count >= 0, self.remaining >= count else {
            throw ProtocolError(.badLength, "\(self.what) claims \(count) bytes, \(self.remaining) left")
        }
        defer { self.offset += count }
        return self.bytes[self.offset..<self.offset + count]
    }

    /// Exactly `count` bytes.
    package mutating func fixed(_ count: Int) throws(ProtocolError) -> [UInt8] { Array(try self.take(count)) }

    /// Bytes with a u32 length prefix.
    package mutating func blob() throws(ProtocolError) -> [UInt8] { Array(try self.take(Int(try self.u32()))) }

    /// A u16-prefixed UTF-8 string of at most `maxLength` bytes.
    package mutating func string(maxLength: Int, field: String) throws(ProtocolError) -> String {
        let length = Int(try self.u16())
        guard length <= maxLength else {
            throw ProtocolError(.badLength, "\(self.what) \(field) is \(length) bytes, at most \(maxLength)")
        }
        let what = self.what
        return try ByteDecoding.utf8(self.take(length), field: "\(what) \(field)")
    }

    package func finish() throws(ProtocolError) {
        guard self.remaining == 0 else {
            throw ProtocolError(.badLength, "\(self.what) has \(self.remaining) bytes too many")
        }
    }
}

/// Helpers for decoding that need no reader.
package enum ByteDecoding {
    /// Whether `string`'s UTF-8 is `bytes`: a name received again (a task's kind, a result's
    /// system) is compared with the last one's so, not made again. With `memcmp`: a byte-by-byte
    /// `elementsEqual` cost ~200 instructions for a 16-byte name, per task at the broker, the worker
    /// and the coordinator.
    package static func string(_ string: String, is bytes: UnsafeRawBufferPointer) -> Bool {
        string.withUTF8Bytes { utf8 in
            guard utf8.count == bytes.count else { return false }
            guard let left = utf8.baseAddress, let right = bytes.baseAddress else { return true }
            return memcmp(left, right, utf8.count) == 0
        }
    }

    /// The little-endian u32 at `offset` of `bytes` (the caller checks the bounds).
    package static func u32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        var value: UInt32 = 0
        for i in 0..<4 { value |= UInt32(bytes[offset + i]) << (8 * i) }
        return value
    }

    /// `bytes` as a String when they are valid UTF-8. `field` names the bytes in the error; it is only
    /// built when there is one.
    package static func utf8<Bytes: Collection<UInt8>>(
        _ bytes: Bytes,
        field: @autoclosure () -> String
    ) throws(ProtocolError) -> String {
        // Names and kinds are ASCII nearly always: checked with a plain loop, they need none of the
        // generic validation machinery (a metadata lookup on every call).
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ProtocolError(.invalidUTF8, "\(field()) is not valid UTF-8")
        }
        return text
    }
}
