import Foundation

/// The brokers a client talks to: one, or the members of an HA group (DESIGN.md §8b), and which one
/// it talks to now. Pure: the client asks it where to go when the one it talks to goes silent or
/// says it does not lead.
///
/// Rules:
/// - A silent member is left for the next in the list, and marked: for ``avoidFor`` a standby's word
///   that it leads is not followed (a standby names the old leader until the old leader's lease has
///   expired; a client that went back to it would wait out its silence again).
/// - A standby that names a listed member as the leader sends the client there. One that names none
///   (no leader yet) or a member just found silent keeps it: the client asks again shortly, and the
///   standby answers as the leader once it has won. One that names a member the client was not given
///   sends it to the next listed member: a client connects only where it was told to.
package struct BrokerList: Sendable, Equatable {
    /// How long a member found silent is not gone back to on a standby's word.
    package static let avoidFor = Duration.seconds(10)

    package let endpoints: [String]
    package private(set) var index = 0
    private var silentAt: [Int: ContinuousClock.Instant] = [:]

    /// - Parameter list: endpoints separated by commas (`tcp://a:5555,tcp://b:5555`); spaces around
    ///   them are ignored, a repeated one counts once.
    package init(_ list: String) {
        var endpoints: [String] = []
        for part in list.split(separator: ",") {
            let endpoint = part.trimmingCharacters(in: .whitespaces)
            if !endpoint.isEmpty, !endpoints.contains(endpoint) { endpoints.append(endpoint) }
        }
        self.endpoints = endpoints.isEmpty ? [list] : endpoints
    }

    /// The member talked to now.
    package var current: String { self.endpoints[self.index] }

    /// More than one member: the client follows the leader among them.
    package var isGroup: Bool { self.endpoints.count > 1 }

    /// The member talked to went silent.
    /// - Returns: the next to try (the same one when there is no other).
    package mutating func silent(now: ContinuousClock.Instant) -> String {
        self.silentAt[self.index] = now
        // The next member not found silent lately; else simply the next.
        let count = self.endpoints.count
        let next = (1..<max(count, 2)).map { (self.index + $0) % count }.first { !self.recentlySilent($0, now: now) }
        self.index = next ?? (self.index + 1) % count
        return self.current
    }

    /// The member talked to does not lead and named `hint` (empty: no leader known).
    /// - Returns: the member to go to, or nil to stay and ask again shortly.
    package mutating func notLeader(hint: String, now: ContinuousClock.Instant) -> String? {
        guard self.isGroup else { return nil }
        if !hint.isEmpty, let named = self.endpoints.firstIndex(of: hint) {
            guard named != self.index, !self.recentlySilent(named, now: now) else { return nil }
            self.index = named
            return self.current
        }
        guard !hint.isEmpty else { return nil }
        // A leader this client was not given: try the next member it was.
        for step in 1..<self.endpoints.count {
            let candidate = (self.index + step) % self.endpoints.count
            if !self.recentlySilent(candidate, now: now) {
                self.index = candidate
                return self.current
            }
        }
        return nil
    }

    private func recentlySilent(_ index: Int, now: ContinuousClock.Instant) -> Bool {
        guard let at = self.silentAt[index] else { return false }
        return now - at < Self.avoidFor
    }
}
