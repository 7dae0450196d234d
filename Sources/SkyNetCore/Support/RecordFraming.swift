/// The framing of the append-only files (the broker's journal, a ``ResultCache``): each record is its
/// payload's length (u32, little-endian), the payload's CRC-32 (u32), then the payload. A crash
/// mid-write leaves a torn last record, which ``scan(_:minLength:maxLength:_:)`` stops before.
package enum RecordFraming {
    /// `payload` framed for the file.
    package static func frame(_ payload: [UInt8]) -> [UInt8] {
        var out = ByteWriter(capacity: payload.count + 8)
        out.u32(UInt32(payload.count))
        out.u32(CRC32.checksum(payload))
        out.bytes.append(contentsOf: payload)
        return out.bytes
    }

    /// Calls `visit` with each whole record's offset and payload, in order, until a record is torn,
    /// fails its CRC, has a length outside `minLength...maxLength`, or `visit` returns false.
    /// - Returns: how many leading bytes hold the records visited (where appending may go on).
    package static func scan(
        _ bytes: [UInt8],
        minLength: Int,
        maxLength: Int,
        _ visit: (_ offset: Int, _ payload: ArraySlice<UInt8>) -> Bool
    ) -> Int {
        var offset = 0
        while bytes.count - offset >= 8 {
            let length = Int(ByteDecoding.u32(bytes, at: offset))
            let crc = ByteDecoding.u32(bytes, at: offset + 4)
            guard length >= minLength, length <= maxLength, bytes.count - offset - 8 >= length else { break }
            let payload = bytes[(offset + 8)..<(offset + 8 + length)]
            guard CRC32.checksum(payload) == crc, visit(offset, payload) else { break }
            offset += 8 + length
        }
        return offset
    }
}

/// CRC-32 (IEEE 802.3, reflected, as in zlib), table-driven.
package enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        return crc
    }

    package static func checksum<C: Collection<UInt8>>(_ bytes: C) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = Self.table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
