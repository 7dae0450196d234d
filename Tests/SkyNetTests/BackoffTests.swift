import Testing

@testable import SkyNet
@testable import SkyNetCore

@Suite("Backoff")
struct BackoffTests {
    @Test("retry backoff: at most 10 ms before the 2nd attempt, doubling to the cap, jittered from zero")
    func retryBackoff() {
        #expect(Backoff().nominal(before: 2) == .milliseconds(10))
        #expect(Backoff().nominal(before: 12) == .seconds(5))
        let backoff = Backoff(initial: .milliseconds(100))
        #expect(backoff.nominal(before: 1) == .zero)
        #expect(backoff.nominal(before: 2) == .milliseconds(100))
        #expect(backoff.nominal(before: 3) == .milliseconds(200))
        #expect(backoff.nominal(before: 6) == .milliseconds(1600))
        #expect(backoff.nominal(before: 7) == .milliseconds(3200))
        #expect(backoff.nominal(before: 8) == .seconds(5))
        #expect(backoff.nominal(before: 100) == .seconds(5))
        var delays: [Duration] = []
        for _ in 0..<200 {
            let delay = backoff.delay(before: 3)
            #expect(delay >= .zero && delay <= .milliseconds(200))
            delays.append(delay)
        }
        #expect(Set(delays).count > 100, "jitter spreads the delays")
        // Full jitter: the whole window is used, not only its upper half (each of these fails for 200
        // uniform draws with a probability below 1e-20).
        #expect(delays.contains { $0 < .milliseconds(50) } && delays.contains { $0 > .milliseconds(150) })
        #expect(Backoff.none.delay(before: 5) == .zero)
        #expect(Backoff(initial: .seconds(2), maximum: .seconds(1)).maximum == .seconds(2))
    }

    @Test("a worker's reconnect backoff: up to 100 ms first, doubling to 5 s")
    func reconnectBackoff() {
        let reconnect = WorkerConfiguration(name: "w").reconnect
        #expect(reconnect.nominal(before: 2) == .milliseconds(100))
        #expect(reconnect.nominal(before: 3) == .milliseconds(200))
        #expect(reconnect.nominal(before: 60) == .seconds(5))
        for attempt in UInt32(2)...20 {
            #expect(reconnect.delay(before: attempt) <= reconnect.nominal(before: attempt))
        }
    }
}
