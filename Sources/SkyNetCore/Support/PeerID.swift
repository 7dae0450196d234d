import Glibc

/// A peer's ZeroMQ routing id, as the broker's ROUTER sockets see it.
///
/// Workers use `w-<30 hex digits>` and coordinators `c-<30 hex digits>` (``unique(prefix:)``), set
/// before they connect.
package struct PeerID: Hashable, Sendable, CustomStringConvertible {
    package let bytes: [UInt8]

    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The bytes in one call (the synthesized version combines them one at a time, and routing ids are
    /// hashed several times for every message the broker handles).
    package func hash(into hasher: inout Hasher) {
        self.bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    /// The id's hash in a `Dictionary` or `Set` (``FastHash``: keyed, far cheaper than SipHash; the
    /// broker looks routing ids up several times per message).
    package func _rawHashValue(seed: Int) -> Int {
        self.bytes.withUnsafeBytes { FastHash.hash($0, seed: seed) }
    }

    /// With `memcmp`: an array's `==` compared a byte at a time, and routing ids (32 bytes) are
    /// compared several times for every message the broker handles.
    package static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        lhs.bytes.withUnsafeBytes { left in rhs.bytes.withUnsafeBytes { right in Self.equal(left, right) } }
    }

    /// Whether two byte buffers hold the same bytes (a routing id received against a known one).
    package static func equal(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        guard left.count == right.count else { return false }
        guard let a = left.baseAddress, let b = right.baseAddress, a != b else { return true }
        return memcmp(a, b, left.count) == 0
    }

    /// A new unique routing id with a prefix, e.g. `w-0f3c…`: the prefix, a dash and the last 15 bytes
    /// of a random task id in hex (114 random bits). With a one-letter prefix that is 32 bytes, which
    /// libzmq keeps inside its message structure (up to 33 bytes); a longer id costs an allocation for
    /// every message sent or received.
    package static func unique(prefix: String) -> PeerID {
        let digits = Array("0123456789abcdef".utf8)
        var bytes = Array(prefix.utf8)
        bytes.append(UInt8(ascii: "-"))
        for byte in TaskID.random().bytes.dropFirst() {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0xF)])
        }
        return PeerID(bytes)
    }

    /// Printable ids as text; others (libzmq's generated ids) as hex.
    package var description: String {
        if !self.bytes.isEmpty, self.bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            return String(decoding: self.bytes, as: UTF8.self)
        }
        return "0x" + self.bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
    }
}

extension String {
    package func leftPadded(to width: Int, with pad: Character = "0") -> String {
        self.count >= width ? self : String(repeating: pad, count: width - self.count) + self
    }
}
