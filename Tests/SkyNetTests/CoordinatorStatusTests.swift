import Foundation
import Logging
import SkyNet
import Testing
import ZeroMQ

@Suite("Coordinator.brokerStatus")
struct CoordinatorStatusTests {
    @Test("one caller's timeout ends its own wait, not the others'")
    func ownTimeout() async throws {
        // A ROUTER that never answers: each wait ends by its own timeout alone.
        let context = try ZMQContext()
        let silent = try Socket(context, type: .router)
        try silent.bind("tcp://127.0.0.1:*")
        let endpoint = try silent.lastEndpoint()
        defer {
            silent.close()
            context.terminate()
        }
        try await withReactor(name: "status-test") { reactor in
            var configuration = CoordinatorConfiguration(broker: endpoint)
            configuration.observer = true
            let coordinator = Coordinator(
                configuration: configuration,
                reactor: reactor,
                logger: Logger(label: "status-test"),
                scanners: []
            )
            try await coordinator.connect()
            let clock = ContinuousClock()
            let started = clock.now
            // The long wait is 3 s, so that the short one (200 ms) can be told from it even when the
            // machine is busy with the other suites: with 1 s, a short wait of 987 ms was seen once
            // in a full run on two cores.
            async let short = coordinator.brokerStatus(timeout: .milliseconds(200))
            async let long = coordinator.brokerStatus(timeout: .seconds(3))
            let shortAnswer = await short
            let shortTook = clock.now - started
            let longAnswer = await long
            let longTook = clock.now - started
            #expect(shortAnswer == nil && longAnswer == nil)
            #expect(shortTook < .seconds(2), "the short wait took \(shortTook)")
            // Before the fix the short timeout resumed every waiter: the long one ended at 200 ms too.
            #expect(longTook >= .milliseconds(2950), "the long wait ended after \(longTook), before its own timeout")
            await coordinator.close()
        }
    }
}
