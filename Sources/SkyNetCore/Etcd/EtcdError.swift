/// What went wrong talking to etcd, in one line.
public struct EtcdError: Error, Sendable, CustomStringConvertible, Equatable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// No member could be reached, or none answered in time: retry later, or another member.
        public static let unavailable = Code(name: "unavailable")
        /// A member answered with an error (gRPC's code and message).
        public static let refused = Code(name: "refused")
        /// A reply that is not what etcd's gateway sends.
        public static let `protocol` = Code(name: "protocol")
        /// An endpoint that is not `http://host:port`.
        public static let badEndpoint = Code(name: "bad endpoint")

        let name: String
        public var description: String { self.name }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "etcd: \(self.message)" }
}
