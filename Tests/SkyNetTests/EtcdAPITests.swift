import Foundation
import Testing

@testable import SkyNetCore

/// The shapes etcd's JSON gateway expects and returns (checked against a real etcd by the
/// integration tests; here without one).
@Suite("etcd API messages")
struct EtcdAPITests {
    func json(_ value: some Encodable) throws -> [String: Any] {
        let data = try JSONEncoder().encode(value)
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    @Test(
        "a transaction: compares on CREATE or VALUE, operations wrapped as request_put / request_range, bytes in base64"
    )
    func transaction() throws {
        let request = EtcdAPI.TxnRequest(
            compare: [.createRevision(key: Array("k".utf8), equals: 42)],
            success: [.put(key: Array("k".utf8), value: [0, 255], lease: 7)],
            failure: [.range(key: Array("k".utf8), rangeEnd: nil)]
        )
        let object = try self.json(request)
        let compare = (object["compare"] as? [[String: Any]])?.first
        #expect(compare?["key"] as? String == "aw==" && compare?["target"] as? String == "CREATE")
        #expect(compare?["create_revision"] as? String == "42" && compare?["result"] as? String == "EQUAL")
        let put = ((object["success"] as? [[String: Any]])?.first?["request_put"]) as? [String: Any]
        #expect(put?["value"] as? String == "AP8=" && put?["lease"] as? String == "7")
        #expect(((object["failure"] as? [[String: Any]])?.first?["request_range"]) != nil)
    }

    @Test("replies: 64-bit numbers as strings, absent fields as zero, a keep-alive's result wrapper")
    func replies() throws {
        let range = try JSONDecoder().decode(
            EtcdAPI.RangeResponse.self,
            from: Data(
                #"{"header":{"revision":"9","member_id":"123"},"kvs":[{"key":"aw==","create_revision":"3","mod_revision":"9","value":"AP8="}],"count":"1"}"#
                    .utf8
            )
        )
        #expect(range.header.revision == 9 && range.count == 1 && range.kvs.first?.value == [0, 255])
        #expect(range.kvs.first?.lease == 0 && range.kvs.first?.createRevision == 3)
        let empty = try JSONDecoder().decode(
            EtcdAPI.RangeResponse.self,
            from: Data(#"{"header":{"revision":"9"}}"#.utf8)
        )
        #expect(empty.kvs.isEmpty && empty.count == 0 && !empty.more)
        let kept = try JSONDecoder().decode(
            EtcdAPI.Lease.self,
            from: Data(#"{"result":{"header":{"revision":"3"},"ID":"411","TTL":"5"}}"#.utf8)
        )
        #expect(kept.id == 411 && kept.ttlSeconds == 5)
        let failed = try JSONDecoder().decode(
            EtcdAPI.TxnResponse.self,
            from: Data(
                #"{"header":{"revision":"4"},"responses":[{"response_range":{"header":{"revision":"4"},"kvs":[],"count":"0"}}]}"#
                    .utf8
            )
        )
        #expect(!failed.succeeded && failed.ranges.count == 1)
    }

    @Test("a prefix's range end: the last byte below 0xFF plus one")
    func prefixEnd() {
        #expect(EtcdAPI.prefixEnd(Array("skynet/".utf8)) == Array("skynet0".utf8))
        #expect(EtcdAPI.prefixEnd([0x61, 0xFF]) == [0x62])
        #expect(EtcdAPI.prefixEnd([0xFF]) == [0])
    }
}
