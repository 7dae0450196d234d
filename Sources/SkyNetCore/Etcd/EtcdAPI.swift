import Foundation

/// The requests and replies of etcd's v3 API as its JSON gateway speaks them (`POST /v3/kv/range`,
/// `/v3/kv/txn`, `/v3/lease/grant`, …; etcd 3.4 and later): keys and values in base64, 64-bit
/// integers as strings, field names as in etcd's protobuf. Pure: `EtcdClient` (in SkyNet) carries them
/// over HTTP. Only what SkyNet uses is modelled.
package enum EtcdAPI {
    /// The gateway's path for each call.
    package enum Path: String, Sendable {
        case range = "/v3/kv/range"
        case put = "/v3/kv/put"
        case deleteRange = "/v3/kv/deleterange"
        case txn = "/v3/kv/txn"
        case leaseGrant = "/v3/lease/grant"
        case leaseRevoke = "/v3/lease/revoke"
        case leaseKeepAlive = "/v3/lease/keepalive"
        case status = "/v3/maintenance/status"
        case compaction = "/v3/kv/compaction"
    }

    /// Every reply's header: the store's revision when it answered, and who answered.
    package struct Header: Decodable, Sendable, Equatable {
        package var revision: Int64
        package var memberID: UInt64

        enum CodingKeys: String, CodingKey {
            case revision
            case memberID = "member_id"
        }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.revision = try container.decodeInt64String(forKey: .revision) ?? 0
            self.memberID = UInt64(try container.decodeIfPresent(String.self, forKey: .memberID) ?? "0") ?? 0
        }
    }

    /// A key and its value as stored, with its revisions.
    package struct KeyValue: Decodable, Sendable, Equatable {
        package var key: [UInt8]
        package var value: [UInt8]
        package var createRevision: Int64
        package var modRevision: Int64
        package var lease: Int64

        package init(key: [UInt8], value: [UInt8], createRevision: Int64, modRevision: Int64, lease: Int64 = 0) {
            self.key = key
            self.value = value
            self.createRevision = createRevision
            self.modRevision = modRevision
            self.lease = lease
        }

        enum CodingKeys: String, CodingKey {
            case key, value, lease
            case createRevision = "create_revision"
            case modRevision = "mod_revision"
        }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.key = try container.decodeBase64(forKey: .key)
            self.value = try container.decodeBase64(forKey: .value)
            self.createRevision = try container.decodeInt64String(forKey: .createRevision) ?? 0
            self.modRevision = try container.decodeInt64String(forKey: .modRevision) ?? 0
            self.lease = try container.decodeInt64String(forKey: .lease) ?? 0
        }
    }

    /// `range`: one key, or every key in `[key, rangeEnd)` (``prefixEnd(_:)`` for a prefix).
    package struct RangeRequest: Encodable, Sendable {
        package var key: [UInt8]
        package var rangeEnd: [UInt8]?
        package var limit: Int64?
        package var countOnly: Bool?
        /// Read at this revision (nil: the latest).
        package var revision: Int64?

        package init(key: [UInt8], rangeEnd: [UInt8]? = nil, limit: Int64? = nil, countOnly: Bool? = nil) {
            self.key = key
            self.rangeEnd = rangeEnd
            self.limit = limit
            self.countOnly = countOnly
        }

        enum CodingKeys: String, CodingKey {
            case key, limit, revision
            case rangeEnd = "range_end"
            case countOnly = "count_only"
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(Data(self.key).base64EncodedString(), forKey: .key)
            if let rangeEnd { try container.encode(Data(rangeEnd).base64EncodedString(), forKey: .rangeEnd) }
            if let limit { try container.encode(String(limit), forKey: .limit) }
            if let countOnly { try container.encode(countOnly, forKey: .countOnly) }
            if let revision { try container.encode(String(revision), forKey: .revision) }
        }
    }

    package struct RangeResponse: Decodable, Sendable {
        package var header: Header
        package var kvs: [KeyValue]
        package var count: Int64
        package var more: Bool

        enum CodingKeys: String, CodingKey { case header, kvs, count, more }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.header = try container.decode(Header.self, forKey: .header)
            self.kvs = try container.decodeIfPresent([KeyValue].self, forKey: .kvs) ?? []
            self.count = try container.decodeInt64String(forKey: .count) ?? 0
            self.more = try container.decodeIfPresent(Bool.self, forKey: .more) ?? false
        }
    }

    /// One operation of a transaction (or a request of its own).
    package enum Operation: Encodable, Sendable, Equatable {
        case put(key: [UInt8], value: [UInt8], lease: Int64?)
        case deleteRange(key: [UInt8], rangeEnd: [UInt8]?)
        case range(key: [UInt8], rangeEnd: [UInt8]?)

        enum CodingKeys: String, CodingKey {
            case requestPut = "request_put"
            case requestDeleteRange = "request_delete_range"
            case requestRange = "request_range"
        }

        enum FieldKeys: String, CodingKey {
            case key, value, lease
            case rangeEnd = "range_end"
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case .put(let key, let value, let lease):
                var fields = container.nestedContainer(keyedBy: FieldKeys.self, forKey: .requestPut)
                try fields.encode(Data(key).base64EncodedString(), forKey: .key)
                try fields.encode(Data(value).base64EncodedString(), forKey: .value)
                if let lease { try fields.encode(String(lease), forKey: .lease) }
            case .deleteRange(let key, let rangeEnd):
                var fields = container.nestedContainer(keyedBy: FieldKeys.self, forKey: .requestDeleteRange)
                try fields.encode(Data(key).base64EncodedString(), forKey: .key)
                if let rangeEnd { try fields.encode(Data(rangeEnd).base64EncodedString(), forKey: .rangeEnd) }
            case .range(let key, let rangeEnd):
                var fields = container.nestedContainer(keyedBy: FieldKeys.self, forKey: .requestRange)
                try fields.encode(Data(key).base64EncodedString(), forKey: .key)
                if let rangeEnd { try fields.encode(Data(rangeEnd).base64EncodedString(), forKey: .rangeEnd) }
            }
        }
    }

    /// A transaction's condition on one key.
    package enum Compare: Encodable, Sendable, Equatable {
        /// The key's create revision equals this (0: the key does not exist).
        case createRevision(key: [UInt8], equals: Int64)
        /// The key's value equals this.
        case value(key: [UInt8], equals: [UInt8])

        enum CodingKeys: String, CodingKey {
            case key, target, result, value
            case createRevision = "create_revision"
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode("EQUAL", forKey: .result)
            switch self {
            case .createRevision(let key, let revision):
                try container.encode(Data(key).base64EncodedString(), forKey: .key)
                try container.encode("CREATE", forKey: .target)
                try container.encode(String(revision), forKey: .createRevision)
            case .value(let key, let value):
                try container.encode(Data(key).base64EncodedString(), forKey: .key)
                try container.encode("VALUE", forKey: .target)
                try container.encode(Data(value).base64EncodedString(), forKey: .value)
            }
        }
    }

    /// `txn`: if every comparison holds, `success` runs, else `failure`; all or nothing, in one
    /// revision, on disk on a majority of the members before the reply.
    package struct TxnRequest: Encodable, Sendable {
        package var compare: [Compare]
        package var success: [Operation]
        package var failure: [Operation]

        package init(compare: [Compare], success: [Operation], failure: [Operation] = []) {
            self.compare = compare
            self.success = success
            self.failure = failure
        }
    }

    package struct TxnResponse: Decodable, Sendable {
        package var header: Header
        package var succeeded: Bool
        /// The ranges' replies among the operations that ran, in order (puts and deletes are left out).
        package var ranges: [RangeResponse]

        enum CodingKeys: String, CodingKey { case header, succeeded, responses }
        enum ResponseKeys: String, CodingKey { case responseRange = "response_range" }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.header = try container.decode(Header.self, forKey: .header)
            self.succeeded = try container.decodeIfPresent(Bool.self, forKey: .succeeded) ?? false
            var ranges: [RangeResponse] = []
            if var responses = try? container.nestedUnkeyedContainer(forKey: .responses) {
                while !responses.isAtEnd {
                    let response = try responses.nestedContainer(keyedBy: ResponseKeys.self)
                    if let range = try response.decodeIfPresent(RangeResponse.self, forKey: .responseRange) {
                        ranges.append(range)
                    }
                }
            }
            self.ranges = ranges
        }
    }

    package struct PutRequest: Encodable, Sendable {
        package var key: [UInt8]
        package var value: [UInt8]
        package var lease: Int64?

        package init(key: [UInt8], value: [UInt8], lease: Int64? = nil) {
            self.key = key
            self.value = value
            self.lease = lease
        }

        package func encode(to encoder: any Encoder) throws {
            try Operation.put(key: self.key, value: self.value, lease: self.lease).encodeFields(to: encoder)
        }
    }

    package struct DeleteRangeRequest: Encodable, Sendable {
        package var key: [UInt8]
        package var rangeEnd: [UInt8]?

        package init(key: [UInt8], rangeEnd: [UInt8]? = nil) {
            self.key = key
            self.rangeEnd = rangeEnd
        }

        package func encode(to encoder: any Encoder) throws {
            try Operation.deleteRange(key: self.key, rangeEnd: self.rangeEnd).encodeFields(to: encoder)
        }
    }

    /// A reply with nothing but its header (put, delete, revoke).
    package struct HeaderOnly: Decodable, Sendable {
        package var header: Header
    }

    /// `compaction`: forget the history of every key before `revision` (the current values stay).
    package struct CompactionRequest: Encodable, Sendable {
        package var revision: Int64

        package init(revision: Int64) { self.revision = revision }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(String(self.revision), forKey: .revision)
        }

        enum CodingKeys: String, CodingKey { case revision }
    }

    package struct LeaseGrantRequest: Encodable, Sendable {
        package var ttlSeconds: Int64

        package init(ttlSeconds: Int64) { self.ttlSeconds = ttlSeconds }

        enum CodingKeys: String, CodingKey { case ttl = "TTL" }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(String(self.ttlSeconds), forKey: .ttl)
        }
    }

    /// A lease's id and its time to live (0 or less: the lease is gone).
    package struct Lease: Decodable, Sendable, Equatable {
        package var id: Int64
        package var ttlSeconds: Int64

        enum CodingKeys: String, CodingKey {
            case id = "ID"
            case ttl = "TTL"
            case result
            case error
        }

        package init(from decoder: any Decoder) throws {
            var container = try decoder.container(keyedBy: CodingKeys.self)
            // A keep-alive's reply is a stream's one message: `{"result": {...}}`.
            if container.contains(.result) {
                container = try container.nestedContainer(keyedBy: CodingKeys.self, forKey: .result)
            }
            self.id = try container.decodeInt64String(forKey: .id) ?? 0
            self.ttlSeconds = try container.decodeInt64String(forKey: .ttl) ?? 0
        }
    }

    package struct LeaseIDRequest: Encodable, Sendable {
        package var id: Int64

        package init(id: Int64) { self.id = id }

        enum CodingKeys: String, CodingKey { case id = "ID" }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(String(self.id), forKey: .id)
        }
    }

    /// An error the gateway returned: gRPC's code and message (`{"error": …, "code": 9, …}`).
    package struct Failure: Decodable, Sendable, Equatable {
        package var code: Int
        package var message: String

        enum CodingKeys: String, CodingKey { case code, message, error }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.code = try container.decodeIfPresent(Int.self, forKey: .code) ?? 0
            self.message =
                try container.decodeIfPresent(String.self, forKey: .message)
                ?? container.decodeIfPresent(String.self, forKey: .error) ?? "unknown error"
        }
    }

    /// The end of the range of every key that starts with `prefix` (etcd's `range_end` for a prefix).
    package static func prefixEnd(_ prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        // Every byte is 0xFF (or the prefix is empty): to the end of the keyspace.
        return [0]
    }
}

extension EtcdAPI.Operation {
    /// The fields of a put or delete as a request of its own (not wrapped as a transaction's operation).
    fileprivate func encodeFields(to encoder: any Encoder) throws {
        var fields = encoder.container(keyedBy: FieldKeys.self)
        switch self {
        case .put(let key, let value, let lease):
            try fields.encode(Data(key).base64EncodedString(), forKey: .key)
            try fields.encode(Data(value).base64EncodedString(), forKey: .value)
            if let lease { try fields.encode(String(lease), forKey: .lease) }
        case .deleteRange(let key, let rangeEnd), .range(let key, let rangeEnd):
            try fields.encode(Data(key).base64EncodedString(), forKey: .key)
            if let rangeEnd { try fields.encode(Data(rangeEnd).base64EncodedString(), forKey: .rangeEnd) }
        }
    }
}

extension KeyedDecodingContainer {
    /// An int64 that protobuf's JSON writes as a string (or, leniently, as a number); nil when absent.
    fileprivate func decodeInt64String(forKey key: Key) throws -> Int64? {
        if let text = try? self.decodeIfPresent(String.self, forKey: key) {
            guard let value = Int64(text) else {
                throw DecodingError.dataCorruptedError(
                    forKey: key,
                    in: self,
                    debugDescription: "not an integer: \(text)"
                )
            }
            return value
        }
        return try self.decodeIfPresent(Int64.self, forKey: key)
    }

    /// Bytes written in base64; empty when absent.
    fileprivate func decodeBase64(forKey key: Key) throws -> [UInt8] {
        guard let text = try self.decodeIfPresent(String.self, forKey: key) else { return [] }
        guard let data = Data(base64Encoded: text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "not base64")
        }
        return Array(data)
    }
}
