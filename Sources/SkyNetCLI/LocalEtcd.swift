package import Foundation
import Glibc
package import SkyNet

/// etcd members on loopback, started from Debian's `etcd` binary (`etcd-server`): what `skynet bench
/// journal` measures HA mode against, and what the tests run. Each member's data lives under
/// ``directory``, removed by ``stop()``.
package final class LocalEtcd {
    package static let binary = "/usr/bin/etcd"
    package static var available: Bool { FileManager.default.isExecutableFile(atPath: Self.binary) }

    package let directory: URL
    package private(set) var members: [ChildProcess?]
    package let clientPorts: [UInt16]
    package let peerPorts: [UInt16]
    /// TLS on the client port: etcd's certificate and key, and the CA its clients must be signed by
    /// (`--client-cert-auth`).
    package struct ServerTLS: Sendable {
        package var certificate: String
        package var key: String
        package var clientCA: String

        package init(certificate: String, key: String, clientCA: String) {
            self.certificate = certificate
            self.key = key
            self.clientCA = clientCA
        }
    }
    package let tls: ServerTLS?

    /// Starts `count` members as one cluster and waits (up to 20 s) until it answers (with `tls`, on
    /// `https://`, asked with `clientTLS`).
    package init(count: Int, tls: ServerTLS? = nil, clientTLS: EtcdTLS? = nil) async throws {
        self.tls = tls
        guard Self.available else {
            throw EtcdError(.unavailable, "no etcd at \(Self.binary): apt-get install etcd-server")
        }
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-etcd-\(UUID())")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        let ports = try Self.freePorts(2 * count)
        self.clientPorts = Array(ports[0..<count])
        self.peerPorts = Array(ports[count...])
        self.members = Array(repeating: nil, count: count)
        for index in 0..<count { try self.start(index) }
        let client = try EtcdClient(endpoints: self.endpoints, timeout: .seconds(1), tls: clientTLS)
        defer { client.close() }
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            do throws(EtcdError) {
                _ = try client.range(EtcdAPI.RangeRequest(key: Array("ready".utf8)))
                return
            } catch {
                guard ContinuousClock.now < deadline else {
                    throw EtcdError(.unavailable, "etcd did not answer within 20 s: \(error.message); \(self.logs)")
                }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    package var endpoints: [String] {
        self.clientPorts.map { "\(self.tls == nil ? "http" : "https")://127.0.0.1:\($0)" }
    }

    package var logs: String { self.members.compactMap { $0?.stderr.suffix(800) }.joined(separator: "\n---\n") }

    /// Starts member `index` (again, on its data directory, after ``kill(_:)``).
    package func start(_ index: Int) throws {
        let cluster = self.peerPorts.enumerated().map { "m\($0.offset)=http://127.0.0.1:\($0.element)" }
            .joined(separator: ",")
        self.members[index] = try ChildProcess(
            executable: Self.binary,
            [
                "--name", "m\(index)",
                "--data-dir", self.directory.appendingPathComponent("m\(index)").path,
                "--listen-client-urls", self.endpoints[index],
                "--advertise-client-urls", self.endpoints[index],
                "--listen-peer-urls", "http://127.0.0.1:\(self.peerPorts[index])",
                "--initial-advertise-peer-urls", "http://127.0.0.1:\(self.peerPorts[index])",
                "--initial-cluster", cluster,
                "--initial-cluster-token", self.directory.lastPathComponent,
                "--log-level", "warn",
            ]
                + (self.tls.map {
                    [
                        "--cert-file", $0.certificate, "--key-file", $0.key, "--trusted-ca-file", $0.clientCA,
                        "--client-cert-auth",
                    ]
                } ?? []),
            name: "etcd-m\(index)",
            directory: self.directory
        )
    }

    /// SIGKILLs member `index`.
    package func kill(_ index: Int) async {
        guard let member = self.members[index] else { return }
        member.signal(SIGKILL)
        _ = await member.waitForExit(timeout: .seconds(5))
        self.members[index] = nil
    }

    package func stop() async {
        for index in self.members.indices { await self.kill(index) }
        try? FileManager.default.removeItem(at: self.directory)
    }

    /// Members still running when their owner is gone (it threw) are killed here.
    deinit {
        for member in self.members { member?.signal(SIGKILL) }
        try? FileManager.default.removeItem(at: self.directory)
    }

    /// `count` distinct free TCP ports on loopback (bound and released: another process could take
    /// one meanwhile, which the start then reports).
    package static func freePorts(_ count: Int) throws -> [UInt16] {
        var ports: [UInt16] = []
        var sockets: [Int32] = []
        defer { for fd in sockets { close(fd) } }
        for _ in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
                }
            }
            guard bound else { throw EtcdError(.unavailable, "cannot find a free port") }
            sockets.append(fd)
            ports.append(UInt16(bigEndian: address.sin_port))
        }
        return ports
    }
}
