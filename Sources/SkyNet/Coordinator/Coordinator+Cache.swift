import SkyNetCore
import Logging

// Jobs through a ResultCache: what the cache holds is answered at once, identical tasks run once,
// and every completed result is stored as it arrives.
extension Coordinator {
    /// Submits a job through `cache`: tasks it has a result for are not submitted (their final
    /// results, with system `"cache"` and 0 attempts, come in the first batch), identical tasks (the
    /// same ``CacheKey``) run once and all take that result, and each completed result is stored as
    /// it arrives. ``summary`` counts them all (``JobSummary/fromCache``, ``JobSummary/identical``).
    /// - Throws: as ``submit(_:)``.
    public func submit(
        _ tasks: [ScanTask],
        cache: ResultCache
    ) async throws -> AsyncThrowingStream<[CoordinatorEvent], any Error> {
        let start = ContinuousClock.now
        let plan = await cache.plan(tasks)
        try self.checkCanStart()
        let cached = plan.cached.map { index, output in
            FinalResult(task: tasks[index], status: .completed, attempts: 0, system: "cache", output: output)
        }
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [CoordinatorEvent].self)
        guard !plan.toRun.isEmpty else {
            var summary = JobSummary()
            for result in cached { summary.add(result, fromCache: true) }
            summary.wall = ContinuousClock.now - start
            (self.lastSummary, self.cacheSummary) = (JobSummary(), summary)
            self.lastSummary.wall = summary.wall
            if !cached.isEmpty { continuation.yield(cached.map(CoordinatorEvent.final)) }
            continuation.finish()
            return stream
        }
        let inner = try self.submit(plan.toRun)
        for result in cached { self.cacheSummary.add(result, fromCache: true) }
        if !cached.isEmpty { continuation.yield(cached.map(CoordinatorEvent.final)) }
        let pump = Task {
            do {
                for try await batch in inner {
                    var events: [CoordinatorEvent] = []
                    var stored: [(key: CacheKey, output: [UInt8])] = []
                    var followed: [FinalResult] = []
                    for event in batch {
                        events.append(event)
                        guard case .final(let result) = event else { continue }
                        if result.status == .completed, let key = plan.keys[result.task.id] {
                            stored.append((key, result.output))
                        }
                        for index in plan.followers[result.task.id] ?? [] {
                            var copy = result
                            copy.task = tasks[index]
                            followed.append(copy)
                            events.append(.final(copy))
                        }
                    }
                    if !followed.isEmpty { self.countIdentical(followed) }
                    if !stored.isEmpty {
                        do {
                            try await cache.store(stored)
                        } catch {
                            // Counted (the exit status says so) and logged once, with the reason.
                            if self.cacheSummary.recordErrors["--cache"] == nil {
                                self.logger.info(
                                    "results not cached: \(error) (the job goes on; they run again next time)"
                                )
                            }
                            self.cacheSummary.recordFailed(stored.count, output: "--cache", reason: "\(error)")
                        }
                    }
                    continuation.yield(events)
                }
                await self.syncCache(cache)
                continuation.finish()
            } catch {
                await self.syncCache(cache)
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in pump.cancel() }
        return stream
    }

    /// Makes the job's stored results durable; a failure is the cache's error for the job.
    private func syncCache(_ cache: ResultCache) async {
        do {
            try await cache.sync()
        } catch {
            if self.cacheSummary.recordErrors["--cache"] == nil {
                self.cacheSummary.recordFailed(0, output: "--cache", reason: "\(error)")
            }
        }
    }

    private func countIdentical(_ results: [FinalResult]) {
        for result in results { self.cacheSummary.add(result, fromCache: false) }
    }
}
