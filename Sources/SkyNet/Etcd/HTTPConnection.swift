import COpenSSL
import Glibc
import SkyNetCore

/// A minimal HTTP/1.1 client for etcd's JSON gateway: POST with a JSON body over one kept-alive TCP
/// connection, replies with `Content-Length` or chunked bodies, and every step bounded by a deadline.
/// Blocking, by design: it runs on the thread of its owner (the etcd journal's own thread, or a
/// test), never on the reactor or a Swift concurrency thread. With a ``TLSContext``, TLS over the
/// same socket (`https://`), the handshake bounded by the same deadline.
///
/// Not `Sendable`: one thread uses it.
final class HTTPConnection {
    let host: String
    let port: UInt16
    private let tls: TLSContext?
    private var fd: Int32 = -1
    private var session: TLSSession?
    /// Bytes read past the last reply (none with a gateway that answers one request at a time).
    private var buffered: [UInt8] = []

    init(host: String, port: UInt16, tls: TLSContext? = nil) {
        self.host = host
        self.port = port
        self.tls = tls
    }

    deinit { self.close() }

    func close() {
        self.session = nil
        if self.fd >= 0 { Glibc.close(self.fd) }
        self.fd = -1
        self.buffered.removeAll()
    }

    /// POSTs `body` to `path` and returns the reply's status and body.
    /// - Throws: ``EtcdError`` (`.unavailable`) when the connection fails or the deadline passes; the
    ///   connection is closed then, and the next call connects again.
    func post(_ path: String, body: [UInt8], timeout: Duration) throws(EtcdError) -> (status: Int, body: [UInt8]) {
        let deadline = ContinuousClock.now + timeout
        do throws(EtcdError) {
            if self.fd < 0 { try self.connect(deadline: deadline) }
            var request = Array(
                "POST \(path) HTTP/1.1\r\nHost: \(self.host):\(self.port)\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n"
                    .utf8
            )
            request += body
            try self.send(request, deadline: deadline)
            return try self.readReply(deadline: deadline)
        } catch {
            self.close()
            throw error
        }
    }

    // MARK: Socket

    private func connect(deadline: ContinuousClock.Instant) throws(EtcdError) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(self.host, String(self.port), &hints, &list)
        guard rc == 0, let first = list else {
            throw EtcdError(.unavailable, "cannot resolve \(self.host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var failure = "no address"
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let address = next {
            next = address.pointee.ai_next
            let fd = socket(address.pointee.ai_family, address.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { continue }
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            if Glibc.connect(fd, address.pointee.ai_addr, address.pointee.ai_addrlen) != 0, errno != EINPROGRESS {
                failure = String(cString: strerror(errno))
                Glibc.close(fd)
                continue
            }
            guard Self.wait(fd, for: Int16(POLLOUT), until: deadline) else {
                failure = "no connection within the deadline"
                Glibc.close(fd)
                continue
            }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            guard error == 0 else {
                failure = String(cString: strerror(error))
                Glibc.close(fd)
                continue
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            self.fd = fd
            if let tls = self.tls { try self.handshake(tls, deadline: deadline) }
            return
        }
        throw EtcdError(.unavailable, "cannot connect to \(self.host):\(self.port): \(failure)")
    }

    /// TLS over the connected socket: the handshake, the server's chain and name checked.
    private func handshake(_ tls: TLSContext, deadline: ContinuousClock.Instant) throws(EtcdError) {
        let session = try TLSSession(context: tls, fd: self.fd, host: self.host)
        while true {
            let rc = SSL_connect(session.ssl)
            if rc == 1 { break }
            switch session.want(after: rc) {
            case .read, .write:
                let events = session.want(after: rc).isRead ? Int16(POLLIN) : Int16(POLLOUT)
                guard Self.wait(self.fd, for: events, until: deadline) else {
                    throw EtcdError(.unavailable, "no TLS handshake with \(self.host):\(self.port) within the deadline")
                }
            case .closed:
                throw EtcdError(.unavailable, "\(self.host):\(self.port) closed the connection in the TLS handshake")
            case .failed(let reason):
                // Not worth another member: a wrong CA or certificate is wrong for all of them.
                throw EtcdError(.refused, "TLS with \(self.host):\(self.port) failed: \(reason)")
            }
        }
        self.session = session
    }

    /// Waits until `fd` is ready for `events`, or the deadline passes (false).
    private static func wait(_ fd: Int32, for events: Int16, until deadline: ContinuousClock.Instant) -> Bool {
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return false }
            var item = pollfd(fd: fd, events: events, revents: 0)
            let milliseconds = Int32(
                clamping: max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
            )
            let n = poll(&item, 1, milliseconds)
            if n < 0, errno == EINTR { continue }
            return n > 0
        }
    }

    private func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws(EtcdError) {
        var offset = 0
        while offset < bytes.count {
            if let session = self.session {
                let n = bytes.withUnsafeBytes {
                    SSL_write(session.ssl, $0.baseAddress! + offset, Int32($0.count - offset))
                }
                if n > 0 {
                    offset += Int(n)
                    continue
                }
                try self.waitForTLS(session, after: n, deadline: deadline)
                continue
            }
            let n = bytes.withUnsafeBytes {
                Glibc.send(self.fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                offset += n
                continue
            }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                guard Self.wait(self.fd, for: Int16(POLLOUT), until: deadline) else {
                    throw EtcdError(.unavailable, "\(self.host):\(self.port) took no request within the deadline")
                }
                continue
            }
            throw EtcdError(
                .unavailable,
                "cannot send to \(self.host):\(self.port): \(String(cString: strerror(errno)))"
            )
        }
    }

    /// Reads more bytes into ``buffered``.
    private func fill(deadline: ContinuousClock.Instant) throws(EtcdError) {
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            if let session = self.session {
                let n = chunk.withUnsafeMutableBytes { SSL_read(session.ssl, $0.baseAddress!, Int32($0.count)) }
                if n > 0 {
                    self.buffered += chunk[0..<Int(n)]
                    return
                }
                try self.waitForTLS(session, after: n, deadline: deadline)
                continue
            }
            let n = chunk.withUnsafeMutableBytes { Glibc.recv(self.fd, $0.baseAddress!, $0.count, 0) }
            if n > 0 {
                self.buffered += chunk[0..<n]
                return
            }
            if n == 0 { throw EtcdError(.unavailable, "\(self.host):\(self.port) closed the connection") }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK {
                guard Self.wait(self.fd, for: Int16(POLLIN), until: deadline) else {
                    throw EtcdError(.unavailable, "no reply from \(self.host):\(self.port) within the deadline")
                }
                continue
            }
            throw EtcdError(
                .unavailable,
                "cannot read from \(self.host):\(self.port): \(String(cString: strerror(errno)))"
            )
        }
    }

    /// After a TLS read or write that did not complete: waits for what it wants, or throws.
    private func waitForTLS(
        _ session: TLSSession,
        after result: Int32,
        deadline: ContinuousClock.Instant
    ) throws(EtcdError) {
        let want = session.want(after: result)
        switch want {
        case .read, .write:
            guard Self.wait(self.fd, for: want.isRead ? Int16(POLLIN) : Int16(POLLOUT), until: deadline) else {
                throw EtcdError(.unavailable, "no reply from \(self.host):\(self.port) within the deadline")
            }
        case .closed:
            throw EtcdError(.unavailable, "\(self.host):\(self.port) closed the connection")
        case .failed(let reason):
            throw EtcdError(.unavailable, "TLS with \(self.host):\(self.port) failed: \(reason)")
        }
    }

    // MARK: Reply

    private static let maxReply = 64 << 20

    private func readReply(deadline: ContinuousClock.Instant) throws(EtcdError) -> (status: Int, body: [UInt8]) {
        // The status line and the headers.
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = Self.find([13, 10, 13, 10], in: self.buffered)
            if headerEnd == nil {
                guard self.buffered.count < 64 << 10 else { throw EtcdError(.protocol, "reply headers over 64 KiB") }
                try self.fill(deadline: deadline)
            }
        }
        let head = String(decoding: self.buffered[0..<headerEnd!], as: UTF8.self)
        self.buffered.removeFirst(headerEnd! + 4)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusParts = lines.first?.split(separator: " ") ?? []
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw EtcdError(.protocol, "not an HTTP reply: \(lines.first.map(String.init) ?? "")")
        }
        var length: Int?
        var chunked = false
        var closes = false
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: " \t")
            switch name {
            case "content-length": length = Int(value)
            case "transfer-encoding": chunked = value.lowercased().contains("chunked")
            case "connection": closes = value.lowercased() == "close"
            default: break
            }
        }
        var body: [UInt8]
        if chunked {
            body = try self.readChunked(deadline: deadline)
        } else if let length {
            guard length <= Self.maxReply else { throw EtcdError(.protocol, "a reply of \(length) bytes") }
            while self.buffered.count < length { try self.fill(deadline: deadline) }
            body = Array(self.buffered[0..<length])
            self.buffered.removeFirst(length)
        } else {
            throw EtcdError(.protocol, "a reply without a length")
        }
        if closes { self.close() }
        return (status, body)
    }

    private func readChunked(deadline: ContinuousClock.Instant) throws(EtcdError) -> [UInt8] {
        var body: [UInt8] = []
        while true {
            var lineEnd = Self.find([13, 10], in: self.buffered)
            while lineEnd == nil {
                try self.fill(deadline: deadline)
                lineEnd = Self.find([13, 10], in: self.buffered)
            }
            let sizeText = String(decoding: self.buffered[0..<lineEnd!], as: UTF8.self)
            self.buffered.removeFirst(lineEnd! + 2)
            guard let size = Int(sizeText.split(separator: ";").first ?? "", radix: 16), size >= 0 else {
                throw EtcdError(.protocol, "a bad chunk size: \(sizeText)")
            }
            guard body.count + size <= Self.maxReply else { throw EtcdError(.protocol, "a reply over 64 MiB") }
            while self.buffered.count < size + 2 { try self.fill(deadline: deadline) }
            body += self.buffered[0..<size]
            self.buffered.removeFirst(size + 2)
            if size == 0 { return body }
        }
    }

    private static func find(_ needle: [UInt8], in bytes: [UInt8]) -> Int? {
        guard bytes.count >= needle.count else { return nil }
        for start in 0...(bytes.count - needle.count) where bytes[start] == needle[0] {
            if bytes[start..<start + needle.count].elementsEqual(needle) { return start }
        }
        return nil
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var text = self[...]
        while let first = text.first, set.contains(first) { text = text.dropFirst() }
        while let last = text.last, set.contains(last) { text = text.dropLast() }
        return String(text)
    }
}
