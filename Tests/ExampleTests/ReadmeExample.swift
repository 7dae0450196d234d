import Logging
import SkyNet
import ZeroMQ

/// Scans sectors 1 to 20 on the broker at `broker`, prints each result, and returns the summary.
func scanSectors(broker: String) async throws -> JobSummary {
    try await withReactor { reactor in
        let tasks = (1...20).map { ScanTask.sector($0, work: .milliseconds(10)) }
        return try await Coordinator.withCoordinator(
            configuration: CoordinatorConfiguration(broker: broker, retry: .local(maxAttempts: 3)),
            reactor: reactor,
            logger: Logger(label: "app"),
            scanners: [SectorScanner()]  // the kinds failed tasks are re-run with here
        ) { coordinator in
            for try await batch in try await coordinator.submit(tasks) {
                for case .final(let result) in batch { print(result.system, result.outputText) }
            }
            return await coordinator.summary
        }
    }
}
