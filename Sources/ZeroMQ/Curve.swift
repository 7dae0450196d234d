import CZMQ

/// CURVE keys (CurveZMQ: Curve25519 key agreement, XSalsa20-Poly1305 per frame) as libzmq handles
/// them: 32 bytes, written as 40 characters of Z85 text.
public enum Curve {
    /// Whether this libzmq was built with CURVE (libsodium). Debian's is.
    public static var isAvailable: Bool { zmq_has("curve") == 1 }

    /// A new key pair from libzmq's random source, Z85 text: (public, secret).
    /// - Throws: ``ZMQError`` (`ENOTSUP`) when libzmq has no CURVE.
    public static func keyPair() throws(ZMQError) -> (publicKey: String, secretKey: String) {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        guard zmq_curve_keypair(&publicKey, &secretKey) == 0 else { throw ZMQError.last("zmq_curve_keypair") }
        return (Self.string(publicKey), Self.string(secretKey))
    }

    /// The public key that belongs to a secret key (both Z85).
    /// - Returns: nil when `secretKey` is not 40 characters of Z85.
    public static func publicKey(forSecretKey secretKey: String) -> String? {
        guard Self.isKey(secretKey) else { return nil }
        var publicKey = [CChar](repeating: 0, count: 41)
        guard zmq_curve_public(&publicKey, secretKey) == 0 else { return nil }
        return Self.string(publicKey)
    }

    /// Whether `text` is a key: 40 characters that decode as Z85 to 32 bytes.
    public static func isKey(_ text: String) -> Bool {
        guard text.utf8.count == 40 else { return false }
        var bytes = [UInt8](repeating: 0, count: 32)
        return zmq_z85_decode(&bytes, text) != nil
    }

    /// The 32 bytes of a Z85 key, nil when it is not one.
    public static func bytes(ofKey text: String) -> [UInt8]? {
        guard text.utf8.count == 40 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 32)
        return zmq_z85_decode(&bytes, text) == nil ? nil : bytes
    }

    /// The Z85 text of 32 key bytes.
    public static func text(ofKey bytes: [UInt8]) -> String? {
        guard bytes.count == 32 else { return nil }
        var text = [CChar](repeating: 0, count: 41)
        return zmq_z85_encode(&text, bytes, 32) == nil ? nil : Self.string(text)
    }

    private static func string(_ chars: [CChar]) -> String {
        String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
