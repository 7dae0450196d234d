import COpenSSL
import Glibc
import SkyNetCore

/// TLS to etcd (`https://` endpoints): the CA that signed etcd's server certificates, and this
/// broker's client certificate and key when etcd asks for one (`--client-cert-auth`). Files in
/// PEM, as etcd's own `--trusted-ca-file`, `--cert-file` and `--key-file`.
public struct EtcdTLS: Sendable, Equatable {
    /// The CA bundle to verify etcd's certificates with (nil: the system's).
    public var caFile: String?
    /// This member's client certificate (chain) and its key; both or neither.
    public var certificateFile: String?
    public var keyFile: String?

    public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }
}

/// An OpenSSL client context made from an ``EtcdTLS``: verification of the server's certificate
/// chain and name always on, TLS 1.2 at least. One per ``EtcdClient`` (one thread).
final class TLSContext {
    let context: OpaquePointer

    /// - Throws: ``EtcdError`` (`.badEndpoint`) when a file cannot be read or the key does not
    ///   match the certificate, with OpenSSL's reason.
    init(_ tls: EtcdTLS) throws(EtcdError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw EtcdError(.badEndpoint, "cannot make a TLS context: \(Self.lastError())")
        }
        self.context = context
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        _ = SSL_CTX_ctrl(context, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_2_VERSION), nil)
        if let ca = tls.caFile {
            guard SSL_CTX_load_verify_locations(context, ca, nil) == 1 else {
                throw EtcdError(.badEndpoint, "cannot read the etcd CA \(ca): \(Self.lastError())")
            }
        } else {
            SSL_CTX_set_default_verify_paths(context)
        }
        switch (tls.certificateFile, tls.keyFile) {
        case (let certificate?, let key?):
            guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1 else {
                throw EtcdError(
                    .badEndpoint,
                    "cannot read the etcd client certificate \(certificate): \(Self.lastError())"
                )
            }
            guard SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1,
                SSL_CTX_check_private_key(context) == 1
            else {
                throw EtcdError(
                    .badEndpoint,
                    "cannot use the etcd client key \(key) (or it does not match \(certificate)): \(Self.lastError())"
                )
            }
        case (nil, nil):
            break
        default:
            throw EtcdError(.badEndpoint, "an etcd client certificate needs its key, and a key its certificate")
        }
    }

    deinit { SSL_CTX_free(self.context) }

    /// OpenSSL's last error on this thread, in words (and the queue emptied).
    static func lastError() -> String {
        var last: UInt = 0
        while case let code = ERR_get_error(), code != 0 { last = code }
        guard last != 0 else { return "unknown TLS error" }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(last, &buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// One TLS session over a connected socket (``HTTPConnection``'s, when the endpoint is `https://`).
final class TLSSession {
    let ssl: OpaquePointer

    /// Starts a session on `fd` that checks the server's name (`host`, a name or an address).
    init(context: TLSContext, fd: Int32, host: String) throws(EtcdError) {
        guard let ssl = SSL_new(context.context) else {
            throw EtcdError(.unavailable, "cannot start TLS: \(TLSContext.lastError())")
        }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        var address = in6_addr()
        let isAddress = inet_pton(AF_INET, host, &address) == 1 || inet_pton(AF_INET6, host, &address) == 1
        if isAddress {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host)
        } else {
            _ = skynet_ssl_set_sni(ssl, host)
            SSL_set1_host(ssl, host)
        }
    }

    deinit { SSL_free(self.ssl) }

    /// What a failed call waits for: readable, writable, or nothing (an error).
    enum Want {
        case read, write, closed
        case failed(String)

        var isRead: Bool { if case .read = self { true } else { false } }
    }

    func want(after result: Int32) -> Want {
        switch SSL_get_error(self.ssl, result) {
        case SSL_ERROR_WANT_READ: return .read
        case SSL_ERROR_WANT_WRITE: return .write
        case SSL_ERROR_ZERO_RETURN: return .closed
        default:
            let verify = SSL_get_verify_result(self.ssl)
            if verify != X509_V_OK {
                return .failed(
                    "its certificate is not trusted: \(String(cString: X509_verify_cert_error_string(verify)))"
                )
            }
            return .failed(TLSContext.lastError())
        }
    }
}
