package import SkyNet

/// `{"listening":{"backend":"tcp://…","epoch":N,"frontend":"tcp://…"}}`: the line `skynet broker`
/// prints on standard output once it listens (the real ports when bound to `*`), and what scripts,
/// `skynet bench` and the tests read it back with.
package struct ListeningLine: JSONLine, Equatable {
    package struct Listening: Codable, Equatable {
        package let frontend: String
        package let backend: String
        package let epoch: UInt32
    }

    package let listening: Listening

    package init(_ endpoints: Broker.Endpoints, epoch: UInt32) {
        self.listening = Listening(frontend: endpoints.frontend, backend: endpoints.backend, epoch: epoch)
    }

    /// The last listening line in `text` (a broker's standard output so far), if any.
    package static func last(in text: String) -> ListeningLine? {
        for line in text.split(separator: "\n").reversed() where line.hasPrefix("{\"listening\"") {
            if let parsed = try? Self.parse(String(line)) { return parsed }
        }
        return nil
    }
}
