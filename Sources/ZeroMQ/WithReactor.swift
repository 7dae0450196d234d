/// Runs `body` with a new ZeroMQ context and one reactor thread, and tears both down afterwards
/// (also when `body` throws): what a program that runs a broker, workers or a coordinator needs
/// around them.
///
/// ```swift
/// try await withReactor(name: "worker") { reactor in
///     try await Worker(configuration: configuration, reactor: reactor, logger: logger, scanners: scanners).run()
/// }
/// ```
///
/// Everything that runs on the reactor (brokers, workers, coordinators) must be stopped or closed
/// before `body` returns.
/// - Parameters:
///   - name: the reactor thread's name, for logs and `top -H`.
///   - idleSpin: how long the reactor may poll before it sleeps under steady traffic (see
///     ``IdleSpin``; zero turns polling off).
///   - body: runs with the reactor.
/// - Returns: what `body` returns.
/// - Throws: ``ZMQError`` when the context or the reactor cannot be made, or what `body` throws.
public func withReactor<R: Sendable>(
    name: String = "reactor",
    idleSpin: Duration = IdleSpin.defaultLimit,
    _ body: (Reactor) async throws -> R
) async throws -> R {
    let context = try ZMQContext()
    let reactor: Reactor
    do {
        reactor = try Reactor(context: context, name: name, idleSpin: idleSpin)
    } catch {
        context.terminate()
        throw error
    }
    do {
        let result = try await body(reactor)
        reactor.shutdown()
        context.terminate()
        return result
    } catch {
        reactor.shutdown()
        context.terminate()
        throw error
    }
}
