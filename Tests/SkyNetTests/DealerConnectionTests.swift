import Logging
import Testing
import ZeroMQ

@testable import SkyNet
@testable import SkyNetCore

@Suite("Broker connections")
struct DealerConnectionTests {
    @Test("a connection is held by its reactor until close(), and let go then (not weakly, not leaked)")
    func heldUntilClosed() async throws {
        try await withReactor(name: "dealer-test") { reactor in
            let (heldBeforeClose, goneAfterClose) = try await ConnectionProbe(reactor: reactor).openAndClose()
            #expect(heldBeforeClose, "its reactor holds it: nothing else references it here")
            #expect(goneAfterClose, "close() lets it go: its hook, timer and monitor handler are gone")
        }
    }
}

/// Makes a connection on the reactor and asks who else holds it, before and after closing it.
private actor ConnectionProbe {
    let reactor: Reactor
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.reactor.asUnownedSerialExecutor() }

    init(reactor: Reactor) { self.reactor = reactor }

    func openAndClose() throws -> (Bool, Bool) {
        // Nothing listens there: libzmq connects in the background, so making it succeeds.
        var connection = try DealerConnection(
            reactor: self.reactor,
            endpoint: "tcp://127.0.0.1:9",
            id: PeerID(Array("c-dealer-test".utf8)),
            role: .coordinator,
            security: nil,
            logger: Logger(label: "dealer-test"),
            onReadable: {},
            onFailure: { _ in }
        )
        connection.send(.heartbeat(epoch: 0))  // parked or gathered: the hook and timer have work
        // Asked of the reference, not of a weak one: a connection let go unclosed would leave its
        // sockets open, and the context's termination would wait for them forever.
        let held = !isKnownUniquelyReferenced(&connection)
        connection.close()
        return (held, isKnownUniquelyReferenced(&connection))
    }
}
