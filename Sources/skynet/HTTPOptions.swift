import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SkyNet
import SkyNetHTTP

/// `--http HOST:PORT` and `--http-token`: the broker's read-only HTTP endpoint (dashboard,
/// `/api/status`, `/metrics`).
struct HTTPOptions: ParsableArguments, CheckedArguments {
    @Option(
        help: ArgumentHelp(
            "Serve the dashboard, /api/status and /metrics on this address (e.g. 127.0.0.1:8787; port 0: any).",
            valueName: "host:port"
        )
    )
    var http: String?

    @Option(
        help: ArgumentHelp(
            "A bearer token every HTTP request must carry (needed off loopback). Also from SKYNET_HTTP_TOKEN.",
            valueName: "token"
        )
    )
    var httpToken: String?

    /// The token: `--http-token`, else `SKYNET_HTTP_TOKEN`. An empty one is no token (the README's
    /// `--http-token "$TOKEN"` with `TOKEN` unset must not open the endpoint to `?token=`).
    var token: String? {
        (self.httpToken ?? ProcessInfo.processInfo.environment["SKYNET_HTTP_TOKEN"]).flatMap { $0.isEmpty ? nil : $0 }
    }

    func check() throws {
        if let http { try Self.check(http, token: self.token) }
    }

    /// The HTTP service for `board`, when `--http` was given; `onListening` gets the URL.
    /// - Parameter descriptors: the process's descriptor limit: the endpoint holds at most an eighth
    ///   of it (and at most ``StatusServer/maxConnections``), so ZeroMQ's peers keep the rest.
    func service(
        board: StatusBoard,
        descriptors: Int = 1024,
        logger: Logger,
        onListening: @escaping @Sendable (String) -> Void
    ) -> (any Service)? {
        guard let http else { return nil }
        return Self.service(
            http,
            token: self.token,
            board: board,
            maxConnections: Self.maxConnections(descriptors: descriptors),
            logger: logger,
            onListening: onListening
        )
    }

    /// The most HTTP connections for a process allowed `descriptors` open files.
    static func maxConnections(descriptors: Int) -> Int {
        min(StatusServer.maxConnections, max(8, descriptors / 8))
    }

    /// The host and port of `HOST:PORT` (`[::1]:PORT` for IPv6).
    static func address(_ http: String) -> (host: String, port: Int)? {
        guard let colon = http.lastIndex(of: ":") else { return nil }
        var host = String(http[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, let port = Int(http[http.index(after: colon)...]), (0...65535).contains(port) else {
            return nil
        }
        return (host, port)
    }

    /// Refuses an address that is not HOST:PORT, and one off loopback without a token.
    static func check(_ http: String, token: String?) throws {
        guard let (host, _) = Self.address(http) else {
            throw ValidationError("--http needs HOST:PORT, e.g. 127.0.0.1:8787, not \(http)")
        }
        if !["localhost", "::1"].contains(host) && !host.hasPrefix("127.") && token == nil {
            throw ValidationError(
                "--http \(http) is not a loopback address: give a non-empty --http-token TOKEN (or SKYNET_HTTP_TOKEN) so that only you can read it"
            )
        }
    }

    static func service(
        _ http: String,
        token: String?,
        board: StatusBoard,
        maxConnections: Int = StatusServer.maxConnections,
        logger: Logger,
        onListening: @escaping @Sendable (String) -> Void
    ) -> (any Service)? {
        guard let (host, port) = Self.address(http) else { return nil }
        var quiet = logger
        quiet.logLevel = max(logger.logLevel, .warning)  // no line per request
        let shown = host.contains(":") ? "[\(host)]" : host
        return StatusServer.application(
            board: board,
            host: host,
            port: port,
            token: token,
            maxConnections: maxConnections,
            logger: quiet
        ) {
            onListening("http://\(shown):\($0)/")
        }
    }
}
