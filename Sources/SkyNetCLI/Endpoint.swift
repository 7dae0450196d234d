import Foundation

/// Checks ZeroMQ endpoints before they reach libzmq, so a typo gets a useful message.
package enum Endpoint {
    /// - Returns: nil when `text` looks like a usable endpoint, else why not.
    package static func problem(with text: String, binding: Bool) -> String? {
        guard !text.isEmpty else { return "an empty value is not an endpoint; use e.g. tcp://127.0.0.1:5555" }
        guard let schemeEnd = text.range(of: "://") else {
            return "\(text) is not an endpoint; use e.g. tcp://127.0.0.1:5555"
        }
        let scheme = text[..<schemeEnd.lowerBound]
        let rest = text[schemeEnd.upperBound...]
        switch scheme {
        case "tcp":
            guard let colon = rest.lastIndex(of: ":"), !rest[..<colon].isEmpty else {
                return "\(text) needs a host and a port, e.g. tcp://127.0.0.1:5555"
            }
            let port = rest[rest.index(after: colon)...]
            if port == "*" {
                return binding ? nil : "\(text): a connect needs a real port, not *"
            }
            guard let number = Int(port), (1...65535).contains(number) else {
                return "\(text): port must be 1 to 65535\(binding ? " or *" : "")"
            }
            return nil
        case "ipc", "inproc":
            return rest.isEmpty ? "\(text) needs a path or name" : nil
        default:
            return "\(text): unsupported transport \(scheme)://; use tcp://, ipc:// or inproc://"
        }
    }
}
