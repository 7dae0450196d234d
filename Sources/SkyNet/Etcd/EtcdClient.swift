import Foundation
import SkyNetCore

/// A blocking client of etcd's v3 API through its JSON gateway, over plain HTTP (`EtcdAPI` has the
/// messages). It talks to one member at a time and moves to the next when that one cannot be
/// reached or does not answer in time; every call is bounded by `timeout`.
///
/// Why the JSON gateway and a small HTTP/1.1 client of our own rather than gRPC: etcd serves the
/// gateway on its client port (3.4 and later), so there is nothing to generate and no new dependency
/// to build in CI (grpc-swift-2 and swift-protobuf, or async-http-client with its TLS stack, cost
/// minutes of every 2-core build), and a blocking client fits the one thread that will write the
/// journal to etcd, as the file journal's thread does.
///
/// Not `Sendable`: one thread uses it.
package final class EtcdClient {
    /// The members, as `(host, port)`.
    package let endpoints: [(host: String, port: UInt16)]
    package let timeout: Duration
    private var current = 0
    private var connection: HTTPConnection?
    /// For `https://` endpoints.
    private let tls: TLSContext?

    /// - Parameters:
    ///   - endpoints: `http://host:port` (or all `https://host:port`) of one or more members.
    ///   - timeout: how long one call may take on one member.
    ///   - tls: the CA and client certificate for `https://` endpoints (nil: the system's CAs, no
    ///     client certificate).
    /// - Throws: ``EtcdError`` (`.badEndpoint`) for an endpoint that is not `http(s)://host:port`,
    ///   a mix of both, TLS files given for `http://`, or a TLS file that cannot be used.
    package init(endpoints: [String], timeout: Duration = .seconds(2), tls: EtcdTLS? = nil) throws(EtcdError) {
        var parsed: [(String, UInt16)] = []
        var secure: Set<Bool> = []
        for endpoint in endpoints {
            let (host, port, isSecure) = try Self.parse(endpoint)
            parsed.append((host, port))
            secure.insert(isSecure)
        }
        guard !parsed.isEmpty else { throw EtcdError(.badEndpoint, "no etcd endpoint given") }
        guard secure.count == 1 else {
            throw EtcdError(.badEndpoint, "the etcd endpoints mix http:// and https://: use one for all")
        }
        if secure.contains(true) {
            self.tls = try TLSContext(tls ?? EtcdTLS())
        } else {
            if let tls, tls != EtcdTLS() {
                throw EtcdError(
                    .badEndpoint,
                    "TLS files are given for etcd, but its endpoints are http://: use https://host:2379"
                )
            }
            self.tls = nil
        }
        self.endpoints = parsed
        self.timeout = timeout
    }

    /// An endpoint's host and port, and whether it is `https://`.
    package static func parse(_ endpoint: String) throws(EtcdError) -> (host: String, port: UInt16, secure: Bool) {
        let trimmed = endpoint.trimmingCharacters(in: .whitespaces)
        let secure = trimmed.hasPrefix("https://")
        guard trimmed.hasPrefix("http://") || secure else {
            throw EtcdError(.badEndpoint, "\(endpoint) is not http://host:port (or https://)")
        }
        var rest = trimmed.dropFirst(secure ? "https://".count : "http://".count)
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]), port > 0
        else { throw EtcdError(.badEndpoint, "\(endpoint) has no port (etcd's client port is 2379)") }
        var host = String(rest[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw EtcdError(.badEndpoint, "\(endpoint) has no host") }
        return (host, port, secure)
    }

    package func close() {
        self.connection?.close()
        self.connection = nil
    }

    // MARK: Calls

    package func range(_ request: EtcdAPI.RangeRequest) throws(EtcdError) -> EtcdAPI.RangeResponse {
        try self.call(.range, request)
    }

    @discardableResult
    package func put(_ request: EtcdAPI.PutRequest) throws(EtcdError) -> EtcdAPI.HeaderOnly {
        try self.call(.put, request)
    }

    @discardableResult
    package func deleteRange(_ request: EtcdAPI.DeleteRangeRequest) throws(EtcdError) -> EtcdAPI.HeaderOnly {
        try self.call(.deleteRange, request)
    }

    package func txn(_ request: EtcdAPI.TxnRequest) throws(EtcdError) -> EtcdAPI.TxnResponse {
        try self.call(.txn, request)
    }

    package func grantLease(ttlSeconds: Int64) throws(EtcdError) -> EtcdAPI.Lease {
        try self.call(.leaseGrant, EtcdAPI.LeaseGrantRequest(ttlSeconds: ttlSeconds))
    }

    /// Renews a lease once. - Returns: its time to live now (0 or less when it is gone).
    package func keepAlive(lease id: Int64) throws(EtcdError) -> Int64 {
        let lease: EtcdAPI.Lease = try self.call(.leaseKeepAlive, EtcdAPI.LeaseIDRequest(id: id))
        return lease.id == id ? lease.ttlSeconds : 0
    }

    /// Compacts etcd's history up to `revision` (the journal keeps no use for old versions).
    package func compact(revision: Int64) throws(EtcdError) {
        let _: EtcdAPI.HeaderOnly = try self.call(.compaction, EtcdAPI.CompactionRequest(revision: revision))
    }

    /// Every key in `[key, end)`, read in pages of `page` (a large journal in one reply would be one
    /// allocation of its whole size, and etcd bounds a reply's size).
    package func rangeAll(key: [UInt8], end: [UInt8], page: Int64 = 1000) throws(EtcdError) -> [EtcdAPI.KeyValue] {
        var values: [EtcdAPI.KeyValue] = []
        var from = key
        var revision: Int64?
        while true {
            var request = EtcdAPI.RangeRequest(key: from, rangeEnd: end, limit: page)
            request.revision = revision
            let reply = try self.range(request)
            // Every page at the first page's revision: one consistent picture.
            revision = revision ?? reply.header.revision
            values += reply.kvs
            guard reply.more, let last = reply.kvs.last else { return values }
            from = last.key + [0]
        }
    }

    package func revokeLease(_ id: Int64) throws(EtcdError) {
        let _: EtcdAPI.HeaderOnly = try self.call(.leaseRevoke, EtcdAPI.LeaseIDRequest(id: id))
    }

    /// One call: on the member in use, and on each of the others in turn when it cannot be reached.
    /// An answer that is an error (a failed compare is not one) is not retried elsewhere.
    private func call<Request: Encodable, Reply: Decodable>(
        _ path: EtcdAPI.Path,
        _ request: Request
    ) throws(EtcdError) -> Reply {
        let body: [UInt8]
        do {
            body = Array(try JSONEncoder().encode(request))
        } catch {
            throw EtcdError(.protocol, "cannot encode \(path.rawValue): \(error)")
        }
        var failures: [String] = []
        for _ in 0..<self.endpoints.count {
            let (host, port) = self.endpoints[self.current]
            let connection = self.connection ?? HTTPConnection(host: host, port: port, tls: self.tls)
            self.connection = connection
            do throws(EtcdError) {
                let (status, reply) = try connection.post(path.rawValue, body: body, timeout: self.timeout)
                guard status == 200 else {
                    let failure = try? JSONDecoder().decode(EtcdAPI.Failure.self, from: Data(reply))
                    // A member without a leader (an election after a member's loss), a leader that
                    // changed or a request that timed out in Raft is etcd's gRPC `Unavailable` (503),
                    // or a deadline or load (504, 429; gRPC codes 14, 4, 8): worth another member, and a retry.
                    let transient = [503, 504, 429].contains(status) || [14, 4, 8].contains(failure?.code ?? -1)
                    throw EtcdError(
                        transient ? .unavailable : .refused,
                        "\(host):\(port) \(path.rawValue): \(failure?.message ?? "HTTP \(status)")"
                    )
                }
                do {
                    return try JSONDecoder().decode(Reply.self, from: Data(reply))
                } catch {
                    throw EtcdError(.protocol, "\(host):\(port) \(path.rawValue): an unexpected reply (\(error))")
                }
            } catch {
                guard error.code == .unavailable else { throw error }
                failures.append(error.message)
                connection.close()
                self.connection = nil
                self.current = (self.current + 1) % self.endpoints.count
            }
        }
        throw EtcdError(.unavailable, "no etcd member answered: \(failures.joined(separator: "; "))")
    }
}
