/// Keyed hashing for the ids the broker looks up several times per task (``TaskID``, ``PeerID``):
/// a folded 64 × 64 → 128-bit multiply, as aHash's fallback and wyhash use, keyed with a random value
/// drawn once per process and with the table's own seed.
///
/// The standard `Hasher` (SipHash-1-3) cost about 200 instructions per lookup, and the broker made
/// some 25 lookups per task: a quarter of its instructions per task (DESIGN.md §3). This costs about
/// 15. It is not SipHash: what keeps a remote peer from choosing ids that collide is the key it
/// cannot see, as with those hashes; ids are 16 random bytes and routing ids at most 255 bytes.
enum FastHash {
    /// Drawn once per process from the system's generator.
    static let key = UInt64.random(in: .min ... .max)

    @inline(__always)
    static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }

    /// Two words under the table's seed.
    @inline(__always)
    static func hash(_ x: UInt64, _ y: UInt64, seed: Int) -> Int {
        Self.hash(x, y, key: Self.key ^ UInt64(truncatingIfNeeded: seed))
    }

    /// Two words under `key` (``key`` mixed with a table's own value, read once per table: a
    /// `static let` costs a `swift_once` check on every use).
    @inline(__always)
    static func hash(_ x: UInt64, _ y: UInt64, key: UInt64) -> Int {
        let mixed = Self.fold(
            x ^ key ^ 0x243F_6A88_85A3_08D3,
            y ^ 0x1319_8A2E_0370_7344 ^ (key &* 0x9E37_79B9_7F4A_7C15)
        )
        return Int(truncatingIfNeeded: Self.fold(mixed ^ 0xA409_3822_299F_31D0, key ^ 0x082E_FA98_EC4E_6C89))
    }

    /// Any number of bytes under the table's seed, 16 at a time (the length is mixed in, so ids that
    /// differ only by trailing zero bytes do not collide).
    static func hash(_ bytes: UnsafeRawBufferPointer, seed: Int) -> Int {
        var state = UInt64(truncatingIfNeeded: bytes.count) &* 0x9E37_79B9_7F4A_7C15
        var offset = 0
        while offset + 16 <= bytes.count {
            let x = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            let y = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            state = Self.fold(state ^ x ^ 0x243F_6A88_85A3_08D3, y ^ 0x1319_8A2E_0370_7344)
            offset += 16
        }
        var x: UInt64 = 0
        var y: UInt64 = 0
        var shift: UInt64 = 0
        while offset < bytes.count {
            if shift < 64 {
                x |= UInt64(bytes[offset]) << shift
            } else {
                y |= UInt64(bytes[offset]) << (shift - 64)
            }
            shift += 8
            offset += 1
        }
        return Self.hash(state ^ x, y, seed: seed)
    }
}
