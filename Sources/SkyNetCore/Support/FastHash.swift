/// Keyed hashing for the ids the broker looks up several times per task (``TaskID``, ``PeerID``):
/// a folded 64 × 64 → 128-bit multiply, as aHash's fallback and wyhash use, keyed with a random value
/// drawn once per process and with the table's own seed.
///
/// The standard `Hasher` (SipHash-1-3) cost about 200 instructions per lookup, and the broker made
/// some 25 lookups per task: a quarter of its instructions per task (DESIGN.md §3). This costs about
/// 15. It is not SipHash: what keeps a remote peer from choosing ids that collide is the key it
/// cannot see, as with those hashes. Both kinds of id are hashed as two words (``PeerID`` keeps its
/// bytes in a compact form of two words and a byte).
@usableFromInline
enum FastHash {
    /// Drawn once per process from the system's generator.
    @usableFromInline static let key = UInt64.random(in: .min ... .max)

    @inlinable @inline(__always)
    static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }

    /// Two words under the table's seed.
    @inlinable @inline(__always)
    static func hash(_ x: UInt64, _ y: UInt64, seed: Int) -> Int {
        Self.hash(x, y, key: Self.key ^ UInt64(truncatingIfNeeded: seed))
    }

    /// Two words under `key` (``key`` mixed with a table's own value, read once per table: a
    /// `static let` costs a `swift_once` check on every use).
    @inlinable @inline(__always)
    static func hash(_ x: UInt64, _ y: UInt64, key: UInt64) -> Int {
        let mixed = Self.fold(
            x ^ key ^ 0x243F_6A88_85A3_08D3,
            y ^ 0x1319_8A2E_0370_7344 ^ (key &* 0x9E37_79B9_7F4A_7C15)
        )
        return Int(truncatingIfNeeded: Self.fold(mixed ^ 0xA409_3822_299F_31D0, key ^ 0x082E_FA98_EC4E_6C89))
    }
}
