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
        if T.self == Int.self { return Self.littleEndian(UInt64(bitPattern: Int64(load(Int.self)))) }
        if let bytes = value as? [UInt8] { return bytes }
        if let text = value as? String { return Array(text.utf8) }
        if T.self == Int64.self { return Self.littleEndian(UInt64(bitPattern: load(Int64.self))) }
        if T.self == UInt.self { return Self.littleEndian(UInt64(load(UInt.self))) }
        if T.self == UInt64.self { return Self.littleEndian(load(UInt64.self)) }
        if T.self == Double.self { return Self.littleEndian(load(Double.self).bitPattern) }
        if T.self == Int32.self { return Self.littleEndian(UInt32(bitPattern: load(Int32.self))) }
        if T.self == UInt32.self { return Self.littleEndian(load(UInt32.self)) }
        if T.self == Float.self { return Self.littleEndian(load(Float.self).bitPattern) }
        if T.self == Bool.self { return [load(Bool.self) ? 1 : 0] }
        if let custom = value as? any CustomScanCoding { return custom.scanBytes }
        do {
            return Array(try Self.encoder.encode(value))
        } catch {
            throw ScanCodingError("cannot encode \(T.self): \(error)")
        }
    }

    /// The value `bytes` encode.
    /// - Throws: ``ScanCodingError`` when they are not a `T` (wrong length, not UTF-8, bad JSON).
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws(ScanCodingError) -> T {
        try self.decode(type, from: bytes, kind: nil)
    }

    static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], kind: String?) throws(ScanCodingError) -> T {
        func wrong(_ what: String) -> ScanCodingError {
            ScanCodingError("\(kind.map { "\($0): " } ?? "")\(what)")
        }
        func fixed<W: FixedWidthInteger & UnsignedInteger>(_: W.Type) throws(ScanCodingError) -> W {
            guard bytes.count == MemoryLayout<W>.size else {
                throw wrong("expected \(MemoryLayout<W>.size) bytes for \(T.self), got \(bytes.count)")
            }
            var value: W = 0
            for (index, byte) in bytes.enumerated() { value |= W(byte) << (8 * index) }
            return value
        }
        // The value as a T, when T is V (checked by the caller): a load, not a dynamic cast.
        // Only for trivial types (numbers), whose bytes are their value.
        func same<V>(_ value: V) -> T { withUnsafeBytes(of: value) { $0.load(as: T.self) } }
        if T.self == Int.self { return same(Int(Int64(bitPattern: try fixed(UInt64.self)))) }
        if T.self == [UInt8].self { return bytes as! T }
        if T.self == String.self {
            guard let text = String(validating: bytes, as: UTF8.self) else { throw wrong("input is not UTF-8 text") }
            return text as! T
        }
        if T.self == Int64.self { return same(Int64(bitPattern: try fixed(UInt64.self))) }
        if T.self == UInt.self { return same(UInt(try fixed(UInt64.self))) }
        if T.self == UInt64.self { return same(try fixed(UInt64.self)) }
        if T.self == Double.self { return same(Double(bitPattern: try fixed(UInt64.self))) }
        if T.self == Int32.self { return same(Int32(bitPattern: try fixed(UInt32.self))) }
        if T.self == UInt32.self { return same(try fixed(UInt32.self)) }
        if T.self == Float.self { return same(Float(bitPattern: try fixed(UInt32.self))) }
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

    private static func littleEndian<W: FixedWidthInteger>(_ value: W) -> [UInt8] {
        (0..<MemoryLayout<W>.size).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
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
