/// An instant's bytes, to tell cheaply that an instant is one seen before. `ContinuousClock.Instant`
/// is not frozen, so each comparison, copy or optional test of one goes through the runtime's value
/// witnesses; its bytes are two words compared in place. Equal bytes are the same instant (an
/// `Instant` is a plain value: a duration since the clock's start); bytes that differ, or that
/// could not be read as two words, say nothing, and the caller goes the long way.
package struct InstantBytes: Sendable {
    private var first: UInt64
    private var second: UInt64
    private var isKnown: Bool

    /// Bytes that are the same as no instant's.
    package static let none = InstantBytes(first: 0, second: 0, isKnown: false)

    private init(first: UInt64, second: UInt64, isKnown: Bool) {
        (self.first, self.second, self.isKnown) = (first, second, isKnown)
    }

    /// `instant`'s bytes (known only when it is two words long, as it is today).
    package init(_ instant: ContinuousClock.Instant) {
        self = withUnsafeBytes(of: instant) { bytes in
            guard bytes.count == 16 else { return .none }
            return InstantBytes(
                first: bytes.loadUnaligned(as: UInt64.self),
                second: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                isKnown: true
            )
        }
    }

    /// Whether these are certainly the bytes of the same instant as `other`'s.
    package func isSame(as other: InstantBytes) -> Bool {
        self.isKnown && other.isKnown && self.first == other.first && self.second == other.second
    }
}
