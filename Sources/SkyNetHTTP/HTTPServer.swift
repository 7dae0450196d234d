import Foundation
public import Hummingbird
import HummingbirdCore
public import Logging
import SkyNet

/// The broker's read-only HTTP endpoint (`skynet broker --http ADDRESS:PORT`), on Hummingbird's
/// own threads: `/` the dashboard, `/events` its live feed (server-sent events, one status a
/// second), `/api/status` the same as JSON, `/metrics` for Prometheus, `/healthz`. With a token,
/// every request needs `Authorization: Bearer TOKEN` (or `?token=TOKEN`, for a browser).
///
/// It cannot starve the broker of descriptors: it holds at most ``maxConnections`` connections
/// (more wait in the kernel's accept backlog, which costs the process no descriptor), and a
/// connection that sends nothing for ``idleTimeout``, or never finishes its request, is closed.
/// A response being written (the `/events` feed) is not idle.
public enum StatusServer {
    /// The most HTTP connections held at once, by default: a few dashboards, Prometheus and probes
    /// need a handful.
    public static let maxConnections = 128
    /// How long a connection may send nothing (mid-request included) before it is closed.
    public static let idleTimeout: Duration = .seconds(10)

    /// An application serving `board` on `host:port` (port 0: any free port; `onListening` gets the
    /// real one). Run it as a service, beside the broker.
    public static func application(
        board: StatusBoard,
        metrics: MetricsExporter = MetricsExporter(),
        host: String,
        port: Int,
        token: String?,
        maxConnections: Int = StatusServer.maxConnections,
        idleTimeout: Duration = StatusServer.idleTimeout,
        logger: Logger,
        onListening: @escaping @Sendable (Int) -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        // An empty token is no token: the caller decides whether an open endpoint is allowed.
        if let token, !token.isEmpty { router.add(middleware: TokenMiddleware(token: token)) }
        router.get("/") { _, _ in
            Response(
                status: .ok,
                headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(string: DashboardPage.html))
            )
        }
        router.get("/api/status") { _, _ -> Response in
            guard board.status != nil else { return Response(status: .serviceUnavailable) }
            return Response(
                status: .ok,
                headers: [.contentType: "application/json", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(string: board.json()))
            )
        }
        router.get("/events") { _, _ in
            Response(
                status: .ok,
                headers: [.contentType: "text/event-stream", .cacheControl: "no-store"],
                body: .init { writer in
                    while !Task.isCancelled {
                        try await writer.write(ByteBuffer(string: "data: \(board.json())\n\n"))
                        try await Task.sleep(for: .seconds(1))
                    }
                    try await writer.finish(nil)
                }
            )
        }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: metrics.render(board.status)))
            )
        }
        router.get("/healthz") { _, _ -> HTTPResponse.Status in board.status == nil ? .serviceUnavailable : .ok }
        let (seconds, attoseconds) = idleTimeout.components
        return Application(
            router: router,
            server: .http1(
                configuration: .init(idleTimeout: .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
            ),
            configuration: .init(
                address: .hostname(host, port: port),
                serverName: "skynet",
                availableConnectionsDelegate: MaximumAvailableConnections(maxConnections, logger: logger)
            ),
            onServerRunning: { channel in onListening(channel.localAddress?.port ?? port) },
            logger: logger
        )
    }
}

/// Refuses a request without the bearer token (401), in constant time for the token's length.
struct TokenMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: String

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let header = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        let query = request.uri.queryParameters.get("token")
        guard let given = header ?? query, Self.same(Array(given.utf8), Array(self.token.utf8)) else {
            return Response(
                status: .unauthorized,
                headers: [.wwwAuthenticate: "Bearer"],
                body: .init(byteBuffer: ByteBuffer(string: "a token is required: Authorization: Bearer TOKEN\n"))
            )
        }
        return try await next(request, context)
    }

    static func same(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
