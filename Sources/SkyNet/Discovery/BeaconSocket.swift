public import SkyNetCore
import Glibc
public import Logging
import Synchronization

/// A UDP socket for beacons, IPv4 (ZeroMQ's zbeacon does the same: subnet broadcast, one port).
enum BeaconSocket {
    /// A socket that may send to broadcast addresses.
    static func sender() throws(DiscoveryError) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw DiscoveryError("cannot open a UDP socket: \(String(cString: strerror(errno)))") }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &on, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    /// A socket bound to `0.0.0.0:port`, shared with other listeners on this host (SO_REUSEADDR:
    /// every one of them gets each broadcast), that wakes every `timeout` to look at its stop flag.
    static func listener(port: UInt16, timeout: Duration) throws(DiscoveryError) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw DiscoveryError("cannot open a UDP socket: \(String(cString: strerror(errno)))") }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        let micros = timeout.components.seconds * 1_000_000 + timeout.components.attoseconds / 1_000_000_000_000
        var interval = timeval(tv_sec: Int(micros / 1_000_000), tv_usec: Int(micros % 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = INADDR_ANY
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw DiscoveryError(
                "cannot listen for beacons on UDP port \(port): \(message) (is another program using it? --discover-port chooses another)"
            )
        }
        return fd
    }

    /// Where beacons go: the broadcast address of each IPv4 interface that is up and broadcasts,
    /// and loopback's (127.255.255.255), so listeners on this host hear them too.
    static func broadcastAddresses(loopbackOnly: Bool) -> [in_addr] {
        var result = [in_addr(s_addr: UInt32(0x7FFF_FFFF).bigEndian)]
        if loopbackOnly { return result }
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return result }
        defer { freeifaddrs(list) }
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            let flags = Int32(bitPattern: entry.pointee.ifa_flags)
            guard flags & Int32(IFF_UP) != 0, flags & Int32(IFF_BROADCAST) != 0,
                flags & Int32(IFF_LOOPBACK) == 0,
                let local = entry.pointee.ifa_addr, local.pointee.sa_family == sa_family_t(AF_INET),
                let mask = entry.pointee.ifa_netmask
            else { continue }
            // The subnet's broadcast address from the address and its mask: an address added
            // without `brd` has none of its own, and a host there still hears the subnet's.
            let host = local.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
            let bits = mask.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
            guard bits != 0, bits != UInt32.max else { continue }  // no subnet to broadcast to
            let address = in_addr(s_addr: host | ~bits)
            if !result.contains(where: { $0.s_addr == address.s_addr }) { result.append(address) }
        }
        return result
    }

    /// Sends one datagram. - Returns: nil, or the `errno` of the send that failed.
    static func send(_ fd: Int32, _ bytes: [UInt8], to address: in_addr, port: UInt16) -> Int32? {
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_port = port.bigEndian
        target.sin_addr = address
        let sent = withUnsafePointer(to: &target) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { target in
                bytes.withUnsafeBytes {
                    sendto(fd, $0.baseAddress, $0.count, 0, target, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        return sent == bytes.count ? nil : errno
    }

    static func text(_ address: in_addr) -> String {
        let value = UInt32(bigEndian: address.s_addr)
        return "\(value >> 24).\(value >> 16 & 0xFF).\(value >> 8 & 0xFF).\(value & 0xFF)"
    }
}

/// Discovery's errors (a port in use, no socket): one line for the user.
public struct DiscoveryError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A broker's beacon on the LAN (`skynet broker --announce`): the datagram every `interval`, on a
/// thread of its own, until ``stop()``. The role may change (an HA broker that takes the lead).
public final class BeaconAnnouncer: Sendable {
    private struct State {
        var beacon: Beacon
        var stopped = false
    }

    private let state: Mutex<State>
    private let port: UInt16
    private let interval: Duration
    private let loopbackOnly: Bool
    private let logger: Logger

    /// Starts announcing.
    /// - Parameter loopbackOnly: only to this host (a broker bound to loopback is not reachable from
    ///   the LAN, so it does not tell the LAN about itself).
    /// - Throws: ``DiscoveryError`` when no socket or thread can be had.
    public init(
        _ beacon: Beacon,
        port: UInt16,
        interval: Duration = .seconds(1),
        loopbackOnly: Bool,
        logger: Logger
    ) throws(DiscoveryError) {
        self.state = Mutex(State(beacon: beacon))
        self.port = port
        self.loopbackOnly = loopbackOnly
        self.interval = interval
        self.logger = logger
        let fd = try BeaconSocket.sender()
        if let rc = POSIX.detachedThread({ self.run(fd) }) {
            close(fd)
            throw DiscoveryError("cannot start the announcer's thread: \(String(cString: strerror(rc)))")
        }
    }

    public func update(role: Beacon.Role) {
        self.state.withLock { $0.beacon.role = role }
    }

    /// Stops after the current datagram (the thread closes its socket).
    public func stop() {
        self.state.withLock { $0.stopped = true }
    }

    private func run(_ fd: Int32) {
        defer { close(fd) }
        var failures = 0
        while true {
            guard let beacon = self.state.withLock({ $0.stopped ? nil : $0.beacon }) else { return }
            let bytes = Array(beacon.text.utf8)
            let targets = BeaconSocket.broadcastAddresses(loopbackOnly: self.loopbackOnly)
            let failed = targets.compactMap { target in
                BeaconSocket.send(fd, bytes, to: target, port: self.port).map {
                    "\(BeaconSocket.text(target)) (\(String(cString: strerror($0))))"
                }
            }
            if !failed.isEmpty {
                failures += 1
                // The first failure, then one in a minute: a network that is down stays visible.
                if failures == 1 || failures % 60 == 0 {
                    self.logger.warning("cannot send the beacon to \(failed.joined(separator: ", "))")
                }
            }
            var pause = timespec(
                tv_sec: Int(self.interval.components.seconds),
                tv_nsec: Int(self.interval.components.attoseconds / 1_000_000_000)
            )
            var left = timespec()
            while nanosleep(&pause, &left) != 0 && errno == EINTR { pause = left }
        }
    }
}

/// A broker heard on the LAN, trusted by the listener's ``BeaconTrust``.
public struct HeardBroker: Sendable, Equatable {
    public var beacon: Beacon
    /// The datagram's source address.
    public var sender: String
    /// The beacon's endpoints with `*` resolved to the sender.
    public var frontend: String
    public var backend: String
    /// When its first beacon came, and its latest.
    public var firstHeard: ContinuousClock.Instant
    public var lastHeard: ContinuousClock.Instant
}

/// Listens for beacons (`skynet worker --discover`, `skynet submit --discover`) on a thread of its
/// own. Brokers it may follow are kept while they keep announcing: one not heard for `expiry` is
/// dropped. Beacons it may not follow are logged once per sender and reason, then ignored.
public final class BeaconListener: Sendable {
    private struct State {
        var heard: [String: HeardBroker] = [:]
        var refused: Set<String> = []
        var stopped = false
    }

    private let state = Mutex(State())
    public let port: UInt16
    public let trust: BeaconTrust
    public let expiry: Duration
    private let logger: Logger

    /// Starts listening.
    /// - Throws: ``DiscoveryError`` when the port cannot be bound.
    public init(port: UInt16, trust: BeaconTrust, expiry: Duration = .seconds(5), logger: Logger) throws(DiscoveryError)
    {
        self.port = port
        self.trust = trust
        self.expiry = expiry
        self.logger = logger
        let fd = try BeaconSocket.listener(port: port, timeout: .milliseconds(200))
        if let rc = POSIX.detachedThread({ self.run(fd) }) {
            close(fd)
            throw DiscoveryError("cannot start the listener's thread: \(String(cString: strerror(rc)))")
        }
    }

    public func stop() {
        self.state.withLock { $0.stopped = true }
    }

    /// The brokers heard within `expiry`, earliest heard first. Those gone silent are dropped (and
    /// logged) here.
    public func brokers(now: ContinuousClock.Instant = .now) -> [HeardBroker] {
        let (live, dropped) = self.state.withLock { state -> ([HeardBroker], [HeardBroker]) in
            let dropped = state.heard.values.filter { now - $0.lastHeard > self.expiry }
            for broker in dropped { state.heard[broker.backend] = nil }
            return (state.heard.values.sorted { $0.firstHeard < $1.firstHeard }, dropped)
        }
        for broker in dropped {
            self.logger.notice(
                "dropped the broker at \(broker.backend): no beacon for \(self.expiry)",
                metadata: ["role": "\(broker.beacon.role.rawValue)"]
            )
        }
        return live
    }

    private func run(_ fd: Int32) {
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: Beacon.maxLength + 1)
        while !self.state.withLock({ $0.stopped }) {
            var source = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = buffer.withUnsafeMutableBytes { bytes in
                withUnsafeMutablePointer(to: &source) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        recvfrom(fd, bytes.baseAddress, bytes.count, 0, $0, &length)
                    }
                }
            }
            guard count > 0 else { continue }  // the timeout (a look at the stop flag), EINTR, or empty
            self.receive(buffer[..<count], sender: BeaconSocket.text(source.sin_addr), now: .now)
        }
    }

    func receive(_ bytes: ArraySlice<UInt8>, sender: String, now: ContinuousClock.Instant) {
        let beacon: Beacon
        switch Beacon.parse(bytes) {
        case .success(let parsed): beacon = parsed
        case .failure(let error):
            self.refuse(sender: sender, kind: "malformed", reason: "not a SkyNet beacon: \(error)")
            return
        }
        if let problem = self.trust.problem(with: beacon, sender: sender) {
            self.refuse(sender: sender, kind: beacon.key ?? "-", reason: problem)
            return
        }
        let backend = Beacon.resolve(beacon.backend, sender: sender)
        let frontend = Beacon.resolve(beacon.frontend, sender: sender)
        let isNew = self.state.withLock { state -> Bool in
            if var known = state.heard[backend] {
                known.beacon = beacon
                known.lastHeard = now
                known.frontend = frontend
                state.heard[backend] = known
                return false
            }
            state.heard[backend] = HeardBroker(
                beacon: beacon,
                sender: sender,
                frontend: frontend,
                backend: backend,
                firstHeard: now,
                lastHeard: now
            )
            return true
        }
        if isNew {
            self.logger.info(
                "heard a broker at \(backend)",
                metadata: [
                    "role": "\(beacon.role.rawValue)", "frontend": "\(frontend)",
                    "key": "\(beacon.key.map { String($0.prefix(8)) + "…" } ?? "none")",
                ]
            )
        }
    }

    /// Logs a refused beacon once per sender and kind (its key, or "malformed"): a sender that
    /// keeps announcing is not logged every second. At most `maxRefusals` are remembered, so a
    /// flood of forged senders costs bounded memory (and, past it, no more lines).
    private func refuse(sender: String, kind: String, reason: String) {
        let first = self.state.withLock { state -> Bool in
            guard state.refused.count < Self.maxRefusals else { return false }
            return state.refused.insert("\(sender) \(kind)").inserted
        }
        if first { self.logger.warning("ignoring the beacon from \(sender): \(reason)") }
    }

    static let maxRefusals = 1024
}

extension HeardBroker {
    /// Which of the heard brokers to follow, and with which key: the rule in one place.
    /// - An HA group (brokers announcing leader or standby): once its leader is heard, all its
    ///   members with the leader's key, the leader first (a worker asks them in turn, as with
    ///   `--broker a,b`). Standbys alone are not followed: a worker given only a standby would be
    ///   told of a leader it was not given; during a failover the new leader soon announces itself.
    /// - Otherwise the single broker heard first, so one that keeps announcing is not left for a
    ///   newcomer.
    /// - Returns: the endpoints for workers (backends) or coordinators (frontends), comma-separated,
    ///   and the key (nil: plain text); nil when none is heard.
    public static func follow(_ heard: [HeardBroker], workers: Bool) -> (endpoints: String, key: String?)? {
        if let leader = heard.first(where: { $0.beacon.role == .leader }) {
            let group = [leader] + heard.filter { $0.beacon.role == .standby && $0.beacon.key == leader.beacon.key }
            return (group.map { workers ? $0.backend : $0.frontend }.joined(separator: ","), leader.beacon.key)
        }
        let singles = heard.filter { $0.beacon.role == .single }
        guard let single = singles.first else { return nil }
        return (workers ? single.backend : single.frontend, single.beacon.key)
    }
}
