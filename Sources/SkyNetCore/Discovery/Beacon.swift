/// A broker's announcement on the local network (`skynet broker --announce`): one UDP datagram, one
/// line of ASCII text, sent every second to each interface's broadcast address (DESIGN.md §4c).
///
///     SKYNET/1 role=single frontend=tcp://*:5555 backend=tcp://*:5556 key=<40 chars of Z85, or ->
///
/// Fields are `name=value` separated by single spaces, after the version token; unknown names are
/// skipped (a later version may add some), a known one given twice or a malformed one makes the whole
/// datagram invalid. A host of `*` or `0.0.0.0` in an endpoint means "the address this datagram came
/// from". The beacon is not authenticated: anyone on the LAN can send one, so a listener trusts the
/// key only when it was given it (``BeaconTrust``), and without CURVE only a loopback sender.
public struct Beacon: Sendable, Equatable {
    /// What a broker is: alone, or the leader or a standby of an HA group.
    public enum Role: String, Sendable, CaseIterable {
        case single, leader, standby
    }

    public static let version = "SKYNET/1"
    /// The default UDP port (ZeroMQ's zbeacon and ZRE use 5670 too; SkyNet's payload differs).
    public static let defaultPort: UInt16 = 5670
    /// The longest datagram a listener reads.
    public static let maxLength = 512

    public var role: Role
    /// Where coordinators connect (`tcp://host:port`; host `*` for "the sender's address").
    public var frontend: String
    /// Where workers connect.
    public var backend: String
    /// The broker's CURVE public key, Z85 (nil: plain text).
    public var key: String?

    public init(role: Role, frontend: String, backend: String, key: String?) {
        self.role = role
        self.frontend = frontend
        self.backend = backend
        self.key = key
    }

    /// The datagram's text.
    public var text: String {
        "\(Self.version) role=\(self.role.rawValue) frontend=\(self.frontend) backend=\(self.backend) key=\(self.key ?? "-")"
    }

    /// Parses a datagram.
    /// - Returns: the beacon, or why it is not one (for a log line; the datagram is dropped).
    public static func parse(_ bytes: some Collection<UInt8>) -> Result<Beacon, BeaconError> {
        guard bytes.count <= Self.maxLength else { return .failure(BeaconError("longer than \(Self.maxLength) bytes")) }
        guard bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            return .failure(BeaconError("not one line of printable ASCII"))
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let words = text.split(separator: " ", omittingEmptySubsequences: false)
        guard words.first == Substring(Self.version) else {
            return .failure(BeaconError("does not start with \(Self.version)"))
        }
        var fields: [Substring: Substring] = [:]
        for word in words.dropFirst() {
            guard let equals = word.firstIndex(of: "="), equals != word.startIndex else {
                return .failure(BeaconError("malformed field '\(word.prefix(40))'"))
            }
            let name = word[..<equals]
            guard fields.updateValue(word[word.index(after: equals)...], forKey: name) == nil else {
                return .failure(BeaconError("field '\(name)' given twice"))
            }
        }
        guard let roleText = fields["role"], let role = Role(rawValue: String(roleText)) else {
            return .failure(BeaconError("no valid role"))
        }
        guard let frontend = fields["frontend"], Self.isEndpoint(frontend),
            let backend = fields["backend"], Self.isEndpoint(backend)
        else {
            return .failure(BeaconError("no valid tcp://host:port frontend and backend"))
        }
        guard let keyText = fields["key"] else { return .failure(BeaconError("no key field")) }
        let key: String?
        if keyText == "-" {
            key = nil
        } else {
            guard Z85.isKeyText(keyText) else { return .failure(BeaconError("the key is not 40 characters of Z85")) }
            key = String(keyText)
        }
        return .success(Beacon(role: role, frontend: String(frontend), backend: String(backend), key: key))
    }

    /// `tcp://HOST:PORT` with a port from 1 to 65535 and a host without spaces or slashes.
    static func isEndpoint(_ text: Substring) -> Bool {
        guard text.hasPrefix("tcp://"), let colon = text.lastIndex(of: ":") else { return false }
        let host = text[text.index(text.startIndex, offsetBy: 6)..<colon]
        guard !host.isEmpty, !host.contains("/"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port)
        else { return false }
        return true
    }

    /// An endpoint with `*` or `0.0.0.0` as its host replaced by `sender` (the datagram's source).
    public static func resolve(_ endpoint: String, sender: String) -> String {
        for wildcard in ["tcp://*:", "tcp://0.0.0.0:"] where endpoint.hasPrefix(wildcard) {
            return "tcp://\(sender):" + endpoint.dropFirst(wildcard.count)
        }
        return endpoint
    }
}

/// Why a datagram is not a beacon.
public struct BeaconError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Which beacons a listener may follow: the rule of discovery's trust, in one place.
///
/// - With CURVE: only a beacon whose key is one of the keys this listener was given (`--broker-key`,
///   a file or a directory). A beacon without a key, or with another key, is an impostor or another
///   pool: ignored, from any address.
/// - Without CURVE: only a beacon without a key, from a loopback sender, unless `insecure`
///   (then from any sender): a plain-text broker off this host could be anyone's.
public struct BeaconTrust: Sendable, Equatable {
    /// The pinned broker keys (nil: plain text, no CURVE).
    public var keys: Set<String>?
    public var insecure: Bool

    public init(keys: Set<String>?, insecure: Bool) {
        self.keys = keys
        self.insecure = insecure
    }

    /// Nil when the beacon may be followed, else why not (one line, for the log).
    public func problem(with beacon: Beacon, sender: String) -> String? {
        if !Self.isLoopback(sender),
            let local = [beacon.frontend, beacon.backend].first(where: { Self.isLoopbackEndpoint($0) })
        {
            return "it announces \(local), which no other host can reach (bind the broker to tcp://*:PORT)"
        }
        if let keys {
            guard let key = beacon.key else {
                return "it announces no CURVE key, and this side uses CURVE"
            }
            guard keys.contains(key) else {
                return "its key \(key.prefix(8))… is not one of --broker-key's (an impostor, or another pool)"
            }
            return nil
        }
        if beacon.key != nil {
            return "it uses CURVE: give --curve-secret and --broker-key"
        }
        if !self.insecure && !Self.isLoopback(sender) {
            return
                "without CURVE, discovery follows only brokers on this host: use CURVE (--curve-secret, --broker-key) or pass --insecure"
        }
        return nil
    }

    static func isLoopback(_ address: String) -> Bool {
        address.hasPrefix("127.") || address == "::1"
    }

    static func isLoopbackEndpoint(_ endpoint: String) -> Bool {
        endpoint.hasPrefix("tcp://127.") || endpoint.hasPrefix("tcp://localhost:") || endpoint.hasPrefix("tcp://[::1]")
    }
}
