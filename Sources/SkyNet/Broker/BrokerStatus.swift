import Foundation

/// A snapshot of a broker: its workers, queue depth and counters (STATUS, `skynet status`).
public struct BrokerStatus: Sendable, Codable, Equatable {
    public struct Worker: Sendable, Codable, Equatable {
        public var id: String
        public var name: String
        public var slots: Int
        public var leased: Int
        public var kinds: [String]
        public var draining: Bool
    }

    public var epoch: UInt32
    public var workers: [Worker]
    public var coordinators: Int
    public var queued: Int
    public var queuedByKind: [String: Int]
    public var leased: Int
    public var submitted: Int
    public var dispatched: Int
    public var resultsForwarded: Int
    public var staleResults: Int
    public var requeued: Int
    public var workersLost: Int
    public var rejected: Int
    public var parkedMessages: Int
    public var badInput: [String: Int]

    init(state: BrokerState, epoch: UInt32, badInput: [String: Int], parked: Int) {
        self.epoch = epoch
        self.workers = state.workers.values.map {
            Worker(
                id: $0.id.description,
                name: $0.name,
                slots: $0.capacity,
                leased: $0.leases.count,
                kinds: $0.kinds.sorted(),
                draining: $0.draining
            )
        }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
        self.coordinators = state.coordinators.values.filter { !$0.detached }.count
        self.queued = state.queueDepth
        self.queuedByKind = state.depthByKind
        self.leased = state.workers.values.reduce(0) { $0 + $1.leases.count }
        self.submitted = state.counters.submitted
        self.dispatched = state.counters.dispatched
        self.resultsForwarded = state.counters.resultsForwarded
        self.staleResults = state.counters.staleResults
        self.requeued = state.counters.requeued
        self.workersLost = state.counters.workersLost
        self.rejected = state.counters.rejected
        self.parkedMessages = parked
        self.badInput = badInput
    }

}

extension BrokerStatus: JSONLine {}

/// A value sent and printed as one line of JSON (STATUS and JOB replies).
public protocol JSONLine: Codable {}

extension JSONLine {
    /// One line of JSON, keys sorted.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(self) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    /// Parses one line of JSON.
    public static func parse(_ json: String) throws -> Self {
        try JSONDecoder().decode(Self.self, from: Data(json.utf8))
    }
}
