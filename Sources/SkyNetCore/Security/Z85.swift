/// Z85 (ZeroMQ RFC 32): how CURVE keys are written as text. A pure encoder, so that the ZAP policy
/// reads a handshake's key without libzmq.
package enum Z85 {
    private static let alphabet = Array(
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8
    )

    /// Whether `text` is 40 characters of the Z85 alphabet: the text form of a 32-byte CURVE key.
    package static func isKeyText(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 40 && text.utf8.allSatisfy { Self.alphabet.contains($0) }
    }

    /// The text of `bytes`, whose count must be a multiple of 4 (a 32-byte key is 40 characters).
    package static func encode(_ bytes: [UInt8]) -> String? {
        guard bytes.count % 4 == 0 else { return nil }
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count / 4 * 5)
        var index = 0
        while index < bytes.count {
            var value = UInt32(bytes[index]) << 24 | UInt32(bytes[index + 1]) << 16
            value |= UInt32(bytes[index + 2]) << 8 | UInt32(bytes[index + 3])
            var chunk = [UInt8](repeating: 0, count: 5)
            for position in stride(from: 4, through: 0, by: -1) {
                chunk[position] = Self.alphabet[Int(value % 85)]
                value /= 85
            }
            text += chunk
            index += 4
        }
        return String(decoding: text, as: UTF8.self)
    }
}
