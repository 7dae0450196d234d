import Logging
import SkyNet
import ZeroMQ

/// A task kind: counts the primes up to its input. Workers run it; the coordinator re-runs failed
/// attempts with it locally.
struct CountPrimes: TaskScanner {
    static let kind = "count-primes"  // what the wire carries: keep it when renaming the type

    func scan(_ limit: Int) async throws -> Int {
        guard limit >= 2 else { return 0 }
        var composite = [Bool](repeating: false, count: limit + 1)
        var count = 0
        for n in 2...limit where !composite[n] {
            count += 1
            for multiple in stride(from: n * n, through: limit, by: n) { composite[multiple] = true }
        }
        return count
    }
}

/// Counts the primes below 10, 100, …, 1,000,000 on the broker at `broker`.
func countPrimes(broker: String) async throws -> [Int: Int] {
    try await withReactor { reactor in
        try await Coordinator.withCoordinator(
            configuration: CoordinatorConfiguration(broker: broker, retry: .local(maxAttempts: 3)),
            reactor: reactor,
            logger: Logger(label: "app"),
            scanners: [CountPrimes()]
        ) { coordinator in
            let million = try await coordinator.run(CountPrimes(), 1_000_000)  // one task: its Int
            var counts = [1_000_000: million]
            for try await result in try await coordinator.submit(CountPrimes(), [10, 100, 1_000, 10_000]) {
                counts[result.input] = try result.get()  // or result.output / result.error
            }
            return counts
        }
    }
}
