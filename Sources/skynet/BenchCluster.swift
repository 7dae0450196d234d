import Foundation
import Glibc
import SkyNet
import SkyNetCLI
import Synchronization

/// A broker and worker processes of this binary on loopback with ephemeral ports, for one benchmark
/// run. Use ``with(brokerArguments:polling:_:)``, which always stops them.
final class BenchCluster {
    let directory: URL
    let broker: ChildProcess
    /// The broker, then every worker: what the watch that ends the bench when one of them exits
    /// during the run looks at (``watch()``).
    private let children = Children()
    /// The workers started so far (``addWorkers(_:slots:extra:)``).
    var workers: [ChildProcess] { self.children.list.withLock { Array($0.dropFirst()) } }
    let frontend: String
    let backend: String
    /// `--idle-spin` for the broker and every worker, as the bench itself was given it.
    let polling: ReactorOptions
    /// With `skynet bench --http`: reads the broker's /metrics and /api/status every 250 ms, while
    /// 40 slow clients hold connections with a request never finished and garbage arrives each time.
    private var watcher: Task<Void, Never>?

    private init(brokerArguments: [String], polling: ReactorOptions) async throws {
        self.polling = polling
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-bench-\(UUID())")
        self.broker = try ChildProcess(
            executable: ChildProcess.currentExecutable,
            ["broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"] + brokerArguments
                + polling.arguments + Self.curveArguments(for: "broker")
                + (BenchCommand.http ? ["--http", "127.0.0.1:0"] : []),
            name: "broker",
            directory: self.directory
        )
        guard let (frontend, backend) = await self.broker.listeningEndpoints(timeout: .seconds(15)) else {
            await self.broker.stop()
            throw BenchError("the broker did not start: \(self.broker.stderr.suffix(500))")
        }
        self.frontend = frontend
        self.backend = backend
        self.children.list.withLock { $0.append(self.broker) }
        if BenchCommand.http {
            guard
                await self.broker.waitForStdout(timeout: .seconds(15), { $0.contains("{\"http\":\"http://") }),
                let line = self.broker.stdout.split(separator: "\n").first(where: { $0.hasPrefix("{\"http\":") }),
                let port = line.split(separator: ":").last.flatMap({ Int($0.prefix { $0.isNumber }) })
            else {
                await self.broker.stop()
                throw BenchError("the broker's HTTP endpoint did not start: \(self.broker.stderr.suffix(500))")
            }
            self.watcher = Task.detached {
                let slow = (0..<40).compactMap { _ in HTTPProbe.connect(port: port) }
                for fd in slow { _ = POSIX.writeAll(fd, Array("GET /api/status HTTP/1.1\r\nHost: x\r\n".utf8)) }
                let garbage: [[UInt8]] = [
                    Array(repeating: 0xFF, count: 1000),
                    Array("GET /\(String(repeating: "A", count: 100_000)) HTTP/1.1\r\n\r\n".utf8),
                    Array("POST /metrics HTTP/1.1\r\nContent-Length: 99999999\r\n\r\nxx".utf8),
                ]
                var round = 0
                while !Task.isCancelled {
                    for path in ["/metrics", "/api/status"] { _ = HTTPProbe.get(port: port, path: path) }
                    if let fd = HTTPProbe.connect(port: port) {
                        _ = POSIX.writeAll(fd, garbage[round % garbage.count])
                        close(fd)
                    }
                    round += 1
                    try? await Task.sleep(for: .milliseconds(250))
                }
                for fd in slow { close(fd) }
            }
        }
    }

    /// Starts a broker (with `brokerArguments`), runs `body` with it, then stops it and every worker
    /// `body` added.
    static func with<R>(
        brokerArguments: [String] = [],
        polling: ReactorOptions,
        _ body: (BenchCluster) async throws -> R
    ) async throws -> R {
        let cluster = try await BenchCluster(brokerArguments: brokerArguments, polling: polling)
        let watch = cluster.watch()
        do {
            let result = try await body(cluster)
            watch.cancel()
            await watch.value
            await cluster.stop()
            return result
        } catch {
            watch.cancel()
            await watch.value
            await cluster.stop()
            throw error
        }
    }

    /// The processes a run started, read by its watch.
    private final class Children: Sendable {
        let list = Mutex<[ChildProcess]>([])
    }

    /// Checks every 250 ms that the broker and the workers still run. One that exits during the
    /// run (killed, crashed) makes the run void, and its client would wait for it for good (a task
    /// on a lost worker waits at the broker for another): the bench says which one went, stops the
    /// others and exits with status 255. Cancelled before the cluster is stopped.
    private func watch() -> Task<Void, Never> {
        let (children, directory) = (self.children, self.directory)
        return Task.detached {
            while !Task.isCancelled {
                let all = children.list.withLock { $0 }
                if let gone = all.first(where: { !$0.isRunning }) {
                    let status = gone.terminationStatus.map { "\($0)" } ?? "unknown"
                    Terminal.writeAll(
                        STDERR_FILENO,
                        "Error: the bench's \(gone.name) (pid \(gone.pid)) exited during the run (status \(status)); the run is void\n"
                    )
                    for child in all where child.isRunning { child.signal(SIGTERM) }
                    for child in all { _ = await child.waitForExit(timeout: .seconds(5)) }
                    try? FileManager.default.removeItem(at: directory)
                    Glibc.exit(255)
                }
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    /// Starts `count` workers with `slots` slots each (named bench-1, bench-2, …).
    func addWorkers(_ count: Int, slots: Int, extra: [String] = []) throws {
        for _ in 0..<count {
            let index = self.workers.count + 1
            let worker = try ChildProcess(
                executable: ChildProcess.currentExecutable,
                ["worker", "--broker", self.backend, "--slots", "\(slots)", "--name", "bench-\(index)"] + extra
                    + self.polling.arguments + Self.curveArguments(for: "worker"),
                name: "worker-\(index)",
                directory: self.directory
            )
            self.children.list.withLock { $0.append(worker) }
        }
    }

    /// With `skynet bench --curve`: the flags that give the broker or a worker its keys.
    static func curveArguments(for role: String) -> [String] {
        guard let keys = BenchCommand.keys else { return [] }
        if role == "broker" {
            return [
                "--curve-secret", keys.directory + "/broker.key_secret", "--allow-workers",
                keys.broker.workersDirectory, "--allow-coordinators", keys.broker.coordinatorsDirectory,
            ]
        }
        return [
            "--curve-secret", keys.directory + "/\(role).key_secret", "--broker-key", keys.directory + "/broker.key",
        ]
    }

    private func stop() async {
        self.watcher?.cancel()
        for worker in self.workers { worker.signal(SIGTERM) }
        for worker in self.workers { await worker.stop() }
        await self.broker.stop()
        try? FileManager.default.removeItem(at: self.directory)
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A minimal HTTP/1.0 GET on loopback (the bench's dashboard watcher; no HTTP client library).
enum HTTPProbe {
    /// The response's bytes, or nil when the connection fails.
    static func get(port: Int, path: String) -> [UInt8]? {
        guard let fd = self.connect(port: port) else { return nil }
        defer { close(fd) }
        guard POSIX.writeAll(fd, Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)) == nil else {
            return nil
        }
        guard case .success(let bytes) = POSIX.readAll(fd) else { return nil }
        return bytes
    }

    /// A connected TCP socket to 127.0.0.1:`port` (the caller closes it), or nil.
    static func connect(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }
}
