import Foundation
import Testing

@testable import SkyNet
@testable import SkyNetCore
import SkyNetFuzzing

/// The fuzz harness's seed corpus and every input a fuzzing run found (`Fuzz/regressions`), replayed:
/// each must run through the decoder and the state machines without breaking an invariant.
@Suite("Fuzz corpus and regressions")
struct FuzzCorpusTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("the committed seeds are the harness's current seeds")
    func seedsUpToDate() throws {
        for (name, bytes) in BrokerFuzzer.seeds() {
            let path = Self.root.appendingPathComponent("Fuzz/corpus/\(name)")
            #expect(try Data(contentsOf: path) == Data(bytes), "\(name): run `skynet-fuzz --seeds Fuzz/corpus`")
        }
    }

    @Test("every seed and regression input replays cleanly")
    func replay() throws {
        var count = 0
        for folder in ["Fuzz/corpus", "Fuzz/regressions"] {
            let directory = Self.root.appendingPathComponent(folder)
            for name in try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() {
                let data = try Data(contentsOf: directory.appendingPathComponent(name))
                data.withUnsafeBytes { BrokerFuzzer.run($0) }
                count += 1
            }
        }
        #expect(count >= 6)
    }
}
