import Foundation
import Logging
import SkyNet
import Testing
import ZeroMQ

/// The README's "In Swift" example, built from this target's copy with the public API only (no
/// `@testable`), and checked to be the same text as the README's.
@Suite("The README's Swift example")
struct ReadmeExampleTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("the README shows ReadmeExample.swift as it is")
    func sameText() throws {
        let readme = try String(contentsOf: Self.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let example = try String(
            contentsOf: Self.packageRoot.appendingPathComponent("Tests/ExampleTests/ReadmeExample.swift"),
            encoding: .utf8
        )
        let section = try #require(readme.range(of: "### In Swift"), "no \"### In Swift\" section")
        let start = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let end = try #require(readme.range(of: "```\n", range: start.upperBound..<readme.endIndex))
        #expect(String(readme[start.upperBound..<end.lowerBound]) == example)
    }

    @Test("it runs against a broker and two workers, returns every typed result and shuts down cleanly")
    func runs() async throws {
        let counts = try await withReactor(name: "cluster") { reactor in
            try await EmbeddedCluster.run(
                workers: 2,
                scanners: [CountPrimes()],
                reactor: reactor,
                logger: Logger(label: "cluster")
            ) { endpoints in
                try await countPrimes(broker: endpoints.frontend)
            }
        }
        #expect(counts == [10: 4, 100: 25, 1_000: 168, 10_000: 1_229, 1_000_000: 78_498])
    }
}
