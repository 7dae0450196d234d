import Glibc

/// The public keys allowed on one broker port: every certificate (`*.key`, or czmq's name without
/// an extension) in a directory, secret files skipped. Re-read when the directory changes
/// (``signature(of:)``) or on SIGHUP.
public struct Allowlist: Sendable, Equatable {
    /// The directory it was read from.
    public let directory: String
    /// Allowed public keys (Z85) and the name each certificate gives (its `metadata` `name`, else
    /// its file name).
    public private(set) var names: [String: String]

    /// An allowlist of the given keys (for tests and embedded use).
    public init(directory: String, names: [String: String]) {
        self.directory = directory
        self.names = names
    }

    /// Whether `publicKey` (Z85) is allowed.
    public func allows(_ publicKey: String) -> Bool { self.names[publicKey] != nil }

    /// How many keys.
    public var count: Int { self.names.count }

    /// Reads every certificate in `directory`.
    /// - Throws: ``SecurityError`` when the directory cannot be read or a certificate in it is
    ///   malformed (naming the file: a broken allowlist should be fixed, not half-used).
    public static func load(directory: String) throws(SecurityError) -> Allowlist {
        var names: [String: String] = [:]
        for file in try Self.files(in: directory) {
            let path = POSIX.path(directory, file)
            let certificate = try CurveCertificate.loadPublic(path: path)
            let base = file.hasSuffix(".key") ? String(file.dropLast(4)) : file
            names[certificate.publicKey] = certificate.metadata["name"].flatMap { $0.isEmpty ? nil : $0 } ?? base
        }
        return Allowlist(directory: directory, names: names)
    }

    /// The certificate files in `directory`, sorted: regular files not starting with a dot, secret
    /// files (`*_secret`) left out.
    static func files(in directory: String) throws(SecurityError) -> [String] {
        guard let dir = opendir(directory) else {
            throw SecurityError(
                .configuration,
                "cannot read the allowlist directory \(directory): \(String(cString: strerror(errno)))"
            )
        }
        defer { closedir(dir) }
        var files: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard !name.hasPrefix("."), !name.hasSuffix("_secret") else { continue }
            var info = stat()
            let path = POSIX.path(directory, name)
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
            files.append(name)
        }
        return files.sorted()
    }

    /// What changes when a certificate in `directory` is added, removed or rewritten: the names,
    /// sizes and modification times of its files (cheap enough to check every heartbeat).
    public static func signature(of directory: String) -> String {
        guard let files = try? Self.files(in: directory) else { return "unreadable" }
        return files.map { file in
            var info = stat()
            let path = POSIX.path(directory, file)
            _ = stat(path, &info)
            return "\(file):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }.joined(separator: "|")
    }
}
