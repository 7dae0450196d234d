import SkyNetCore
internal import FoundationEssentials

/// How a ``TaskScanner``'s typed input and output travel as bytes.
///
/// | Type | Bytes |
/// |---|---|
/// | `[UInt8]` | unchanged |
/// | `String` | its UTF-8 |
/// | `Int`, `Int64`, `UInt`, `UInt64`, `Double` | 8 bytes, little-endian (`Double`: its IEEE 754 bits) |
/// | `Int32`, `UInt32`, `Float` | 4 bytes, little-endian |
/// | `Bool` | 1 byte, 0 or 1 |
/// | a ``CustomScanCoding`` type | its own ``CustomScanCoding/scanBytes`` |
/// | anything else | JSON (Foundation's `JSONEncoder`, keys sorted, so equal values give equal bytes) |
///
/// The fixed forms cost no allocation beyond the bytes and are what a non-Swift peer can read with
/// one line; JSON is what every language reads. Equal values always give equal bytes, which is what
/// a ``ResultCache`` key needs.
public enum ScanCoding {
    /// The bytes of `value`.
    /// - Throws: ``ScanCodingError`` when a `Codable` type fails to encode.
    public static func encode<T: Encodable>(_ value: T) throws(ScanCodingError) -> [UInt8] {
        // Metatype comparisons and a load, not dynamic casts: this runs for every typed task, twice.
        // Only for trivial types (numbers, Bool), whose bytes are their value.
        func load<W>(_: W.Type) -> W { withUnsafeBytes(of: value) { $0.load(as: W.self) } }
        // T is [UInt8] itself: the same value, without a dynamic cast (the raw kinds' every task).
        if T.self == [UInt8].self { return unsafeBitCast(value, to: [UInt8].self) }
        if T.self == Int.self { return Self.bytes(UInt64(bitPattern: Int64(load(Int.self)))) }
        if let text = value as? String { return Array(text.utf8) }
        if T.self == Int64.self { return Self.bytes(UInt64(bitPattern: load(Int64.self))) }
        if T.self == UInt.self { return Self.bytes(UInt64(load(UInt.self))) }
        if T.self == UInt64.self { return Self.bytes(load(UInt64.self)) }
        if T.self == Double.self { return Self.bytes(load(Double.self).bitPattern) }
        if T.self == Int32.self { return Self.bytes(UInt32(bitPattern: load(Int32.self))) }
        if T.self == UInt32.self { return Self.bytes(load(UInt32.self)) }
        if T.self == Float.self { return Self.bytes(load(Float.self).bitPattern) }
        if T.self == Bool.self { return [load(Bool.self) ? 1 : 0] }
        if let custom = value as? any CustomScanCoding { return custom.scanBytes }
        do {
            return Array(try Self.encoder.encode(value))
        } catch {
            throw ScanCodingError("cannot encode \(T.self): \(error)")
        }
    }

    /// Whether values of `type` have a compact form (bytes, a string, a number, `Bool`, a
    /// ``CustomScanCoding`` type) rather than JSON: cheap enough to decode on a reactor thread.
    @usableFromInline
    static func isCompact<T>(_ type: T.Type) -> Bool {
        T.self == [UInt8].self || T.self == Int.self || T.self == String.self || T.self == Int64.self
            || T.self == UInt.self || T.self == UInt64.self || T.self == Double.self || T.self == Int32.self
            || T.self == UInt32.self || T.self == Float.self || T.self == Bool.self
            || T.self is any CustomScanCoding.Type
    }

    /// The value `bytes` encode.
    /// - Throws: ``ScanCodingError`` when they are not a `T` (wrong length, not UTF-8, bad JSON).
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws(ScanCodingError) -> T {
        try self.decode(type, from: bytes, kind: nil)
    }

    @usableFromInline
    static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], kind: String?) throws(ScanCodingError) -> T {
        func wrong(_ what: String) -> ScanCodingError {
            ScanCodingError("\(kind.map { "\($0): " } ?? "")\(what)")
        }
        // Concrete, not generic over the width: generic arithmetic goes through witness tables on
        // every operation, and this runs twice per typed task.
        func u64() throws(ScanCodingError) -> UInt64 {
            guard bytes.count == 8 else { throw wrong("expected 8 bytes for \(T.self), got \(bytes.count)") }
            return UInt64(littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
        }
        func u32() throws(ScanCodingError) -> UInt32 {
            guard bytes.count == 4 else { throw wrong("expected 4 bytes for \(T.self), got \(bytes.count)") }
            return UInt32(littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) })
        }
        // The value as a T, when T is V (checked by the caller): a load, not a dynamic cast.
        // Only for trivial types (numbers), whose bytes are their value.
        func same<V>(_ value: V) -> T { withUnsafeBytes(of: value) { $0.load(as: T.self) } }
        if T.self == [UInt8].self { return unsafeBitCast(bytes, to: T.self) }  // T is [UInt8] itself
        if T.self == Int.self { return same(Int(Int64(bitPattern: try u64()))) }
        if T.self == String.self {
            guard let text = String(validating: bytes, as: UTF8.self) else { throw wrong("input is not UTF-8 text") }
            return text as! T
        }
        if T.self == Int64.self { return same(Int64(bitPattern: try u64())) }
        if T.self == UInt.self { return same(UInt(try u64())) }
        if T.self == UInt64.self { return same(try u64()) }
        if T.self == Double.self { return same(Double(bitPattern: try u64())) }
        if T.self == Int32.self { return same(Int32(bitPattern: try u32())) }
        if T.self == UInt32.self { return same(try u32()) }
        if T.self == Float.self { return same(Float(bitPattern: try u32())) }
        if let custom = T.self as? any CustomScanCoding.Type {
            do throws(ScanCodingError) {
                return try custom.init(scanBytes: bytes) as! T
            } catch {
                throw wrong(error.message)
            }
        }
        if T.self == Bool.self {
            guard bytes.count == 1, bytes[0] <= 1 else { throw wrong("expected one byte 0 or 1 for Bool") }
            return (bytes[0] == 1) as! T
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(bytes))
        } catch {
            throw wrong("not the JSON of \(T.self): \(Self.describe(error))")
        }
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    private static func bytes(_ value: UInt64) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    private static func bytes(_ value: UInt32) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    /// A decoding error in one line (Foundation's descriptions span several).
    private static func describe(_ error: any Error) -> String {
        guard let decoding = error as? DecodingError else { return "\(error)" }
        switch decoding {
        case .dataCorrupted(let context), .typeMismatch(_, let context), .valueNotFound(_, let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        case .keyNotFound(let key, _):
            return "missing \"\(key.stringValue)\""
        @unknown default:
            return "\(error)"
        }
    }
}

/// A type with a byte form of its own (binary-safe and compact where JSON is neither), which
/// ``ScanCoding`` uses instead of JSON: ``ExecRequest`` and ``ExecOutput`` are two.
public protocol CustomScanCoding: Codable {
    /// The value's bytes.
    var scanBytes: [UInt8] { get }
    /// The value `bytes` encode.
    /// - Throws: ``ScanCodingError`` when they do not.
    init(scanBytes bytes: [UInt8]) throws(ScanCodingError)
}

/// A value that could not be encoded, or bytes that are not the type expected.
public struct ScanCodingError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    init(_ message: String) { self.message = message }
    public var description: String { self.message }
}
