import Foundation
import SkyNet
import SkyNetCLI
import ZeroMQ

/// Sends malformed traffic to a broker's two ports, as a broken or hostile peer would.
enum Garbage {
    static func send(frontend: String, backend: String) throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let id = TaskID.random()
        let validHeader = Header(.heartbeat).encode()
        var badMagic = validHeader
        badMagic[0] = 0
        var badVersion = validHeader
        badVersion[2] = 9
        let junk: [[[UInt8]]] = [
            [[1, 2, 3]],
            [[]],
            [badMagic],
            [badVersion],
            [Array(validHeader.prefix(31))],
            [validHeader, [1]],
            (0..<100).map { [UInt8($0)] },
            [Header(.ready, arg: 0).encode(), [0, 0]],
            [Header(.result, arg: 0, attempt: 1, taskID: id).encode(), [0], []],
            [Header(.submit, attempt: 1, taskID: id).encode(), [0xFF, 0xFF, 1], []],
            [Header(.result, arg: 0, attempt: 1, taskID: id).encode(), ResultMetaBytes.some, Array("x".utf8)],
            (0..<4).map { _ in (0..<40).map { _ in UInt8.random(in: 0...255) } },
            // BATCHes: truncated, empty, nested, and one whose second message is bad.
            [Header(.batch, arg: 3).encode(), [1, 2, 3]],
            [Header(.batch, arg: 0).encode(), []],
            WireMessage.batch([WireMessage.batch([validHeader.map { $0 }].map { [$0] }).encode()]).encode(),
            WireMessage.batch(
                [validHeader].map { [$0] } + [[Header(.submit, attempt: 1, taskID: id).encode(), [0xFF], []]]
            )
            .encode(),
            // One-frame BATCHes: truncated, more messages than it holds, a bad header, one inside
            // another, and a flagged two-frame one from a peer that then goes silent.
            [Header(.batch, arg: 3).encode() + [1, 2, 3]],
            [Header(.batch, arg: 2).encode() + Self.packed([validHeader])],
            [
                Array(badVersion.prefix(3)) + [Command.batch.rawValue] + Array(validHeader.dropFirst(4))
                    + Self.packed([validHeader])
            ],
            [
                Header(.batch, arg: 1).encode()
                    + Self.packed([Header(.batch, arg: 1).encode() + Self.packed([validHeader])])
            ],
            [Header(.batch, flags: Header.readsOneFrameFlag, arg: 1).encode(), Self.packed([validHeader])],
        ]
        for endpoint in [frontend, backend] {
            let socket = try Socket(context, type: .dealer)
            try socket.set(.linger(milliseconds: 1000))
            try socket.connect(endpoint)
            for message in junk { _ = try socket.send(message) }
            // Closed with a linger of 1 s: the context's termination waits for these to leave.
            socket.close()
        }
        // A peer that does not speak ZMTP at all.
        try self.rawTCP(endpoint: backend, bytes: Array("GET / HTTP/1.1\r\n\r\n".utf8))
    }

    /// One message's frames packed as in a BATCH.
    static func packed(_ frames: [[UInt8]]) -> [UInt8] {
        var writer = Batch.Writer()
        writer.append(frames)
        return writer.bytes
    }

    static func rawTCP(endpoint: String, bytes: [UInt8]) throws {
        guard let colon = endpoint.lastIndex(of: ":"), let port = UInt16(endpoint[endpoint.index(after: colon)...])
        else { return }
        guard let fd = Self.connectTCP(port: port) else { return }
        defer { close(fd) }
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// A TCP connection to `127.0.0.1:port`, nil when it cannot be made (the caller closes it).
    static func connectTCP(port: UInt16) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }
}

/// A well-formed RESULT meta frame (for a RESULT from a peer that never said READY).
enum ResultMetaBytes {
    static let some: [UInt8] = {
        let frames = WireMessage.result(
            TaskID.random(),
            attempt: 1,
            .completed,
            ResultMeta(system: "x", durationMicroseconds: 0, slot: 0, busy: 0),
            body: []
        ).encode()
        return frames[1]
    }()
}
