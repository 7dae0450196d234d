import Foundation
public import Hummingbird
public import Logging
import SkyNet

/// The broker's read-only HTTP endpoint (`skynet broker --http ADDRESS:PORT`), on Hummingbird's
/// own threads: `/` the dashboard, `/events` its live feed (server-sent events, one status a
/// second), `/api/status` the same as JSON, `/metrics` for Prometheus, `/healthz`. With a token,
/// every request needs `Authorization: Bearer TOKEN` (or `?token=TOKEN`, for a browser).
public enum StatusServer {
    /// An application serving `board` on `host:port` (port 0: any free port; `onListening` gets the
    /// real one). Run it as a service, beside the broker.
    public static func application(
        board: StatusBoard,
        metrics: MetricsExporter = MetricsExporter(),
        host: String,
        port: Int,
        token: String?,
        logger: Logger,
        onListening: @escaping @Sendable (Int) -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        if let token { router.add(middleware: TokenMiddleware(token: token)) }
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
        return Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: "skynet"),
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
