import Foundation
import Testing

@testable import SkyNet
@testable import SkyNetCore

@Suite("Result cache, SHA-256 and head-and-tail capture")
struct ResultCacheTests {
    static func directory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("skynet-cache-\(UUID())").path
    }

    @Test("SHA-256 matches the FIPS 180-4 test vectors")
    func sha256() {
        func hex(_ text: String) -> String { CacheKey(bytes: SHA256.hash(Array(text.utf8))).description }
        #expect(hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        )
        #expect(
            CacheKey(bytes: SHA256.hash([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))).description
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        )
    }

    @Test("keys cover kind and input; an exec key ignores the sequence number and the output cap")
    func keys() {
        let a = ScanTask(kind: "k", input: [1])
        #expect(CacheKey(a) == CacheKey(ScanTask(kind: "k", input: [1])))
        #expect(CacheKey(a) != CacheKey(ScanTask(kind: "j", input: [1])))
        #expect(CacheKey(a) != CacheKey(ScanTask(kind: "k", input: [2])))
        func exec(_ request: ExecRequest) -> CacheKey {
            CacheKey(ScanTask(kind: ExecScanner.kind, input: request.scanBytes))
        }
        let gzip = ExecRequest(["gzip", "a"], sequence: 1)
        #expect(exec(gzip) == exec(ExecRequest(["gzip", "a"], sequence: 7, maxOutput: 10)))
        #expect(exec(gzip) != exec(ExecRequest(["gzip", "b"], sequence: 1)))
        #expect(exec(gzip) != exec(ExecRequest(["gzip", "a"], environment: ["K": "V"], sequence: 1)))
        #expect(exec(gzip) != exec(ExecRequest(["gzip", "a"], workingDirectory: "/srv", sequence: 1)))
    }

    @Test("stored results survive reopening; a torn tail is cut off; a second opener is refused")
    func storage() async throws {
        let directory = Self.directory()
        let first = try ResultCache(directory: directory)
        let keys = (0..<50).map { CacheKey(ScanTask(kind: "k", input: [UInt8($0)])) }
        try await first.store(keys.enumerated().map { ($1, Array("output \($0)".utf8)) })
        #expect(throws: ResultCacheError.self) { try ResultCache(directory: directory) }
        try await first.close()
        // A torn record at the end, as a crash mid-write leaves it.
        let handle = try #require(FileHandle(forWritingAtPath: directory + "/results.log"))
        handle.seekToEndOfFile()
        handle.write(Data([40, 0, 0, 0, 1, 2, 3, 4, 5]))
        handle.closeFile()
        let second = try ResultCache(directory: directory)
        #expect(await second.count == 50)
        #expect(await second.output(for: keys[7]) == Array("output 7".utf8))
        #expect(await second.output(for: CacheKey(ScanTask(kind: "k", input: [200]))) == nil)
        try await second.store([(CacheKey(ScanTask(kind: "k", input: [200])), [])])
        try await second.close()
        let third = try ResultCache(directory: directory)
        #expect(await third.count == 51)
        #expect(await third.output(for: CacheKey(ScanTask(kind: "k", input: [200]))) == [])
    }

    @Test("a plan answers from the cache, runs identical tasks once, and runs the rest")
    func plan() async throws {
        let cache = try ResultCache(directory: Self.directory())
        let tasks = [1, 2, 1, 3, 2, 1].map { ScanTask(kind: "k", input: [UInt8($0)]) }
        try await cache.store([(CacheKey(tasks[3]), [33])])
        let plan = await cache.plan(tasks)
        #expect(plan.cached.map(\.index) == [3] && plan.cached.first?.output == [33])
        #expect(plan.toRun.map(\.id) == [tasks[0].id, tasks[1].id])
        #expect(plan.followers[tasks[0].id] == [2, 5] && plan.followers[tasks[1].id] == [4])
    }

    @Test("head and tail: all of a short stream, the first and last halves of a long one")
    func headTail() {
        var short = HeadTail(limit: 10)
        short.append(Array("hello".utf8))
        #expect(short.bytes == Array("hello".utf8) && short.total == 5)
        var long = HeadTail(limit: 10)
        for chunk in ["abc", "defgh", "ijklmnop", "qrstuvwxyz"] { long.append(Array(chunk.utf8)) }
        #expect(String(decoding: long.bytes, as: UTF8.self) == "abcdevwxyz" && long.total == 26)
        var byteWise = HeadTail(limit: 4)
        for byte in Array("0123456789".utf8) { byteWise.append([byte]) }
        #expect(String(decoding: byteWise.bytes, as: UTF8.self) == "0189")
    }
}
