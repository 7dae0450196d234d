import Glibc
public import SkyNetCore

// Reading an allowlist's directory (the type is the core's: ZAPPolicy decides with it).
extension Allowlist {
    /// Reads every certificate in `directory`; files that are not certificates by name, and
    /// certificates that cannot be read, are left out and listed in ``skipped``.
    /// - Throws: ``SecurityError`` when the directory itself cannot be read.
    public static func load(directory: String) throws(SecurityError) -> Allowlist {
        var names: [String: String] = [:]
        var skipped: [String] = []
        for file in try Self.files(in: directory) {
            guard Self.isCertificateName(file) else {
                skipped.append(
                    "\(POSIX.path(directory, file)): not a certificate name (*.key, or no extension); skipped"
                )
                continue
            }
            let certificate: CurveCertificate
            do {
                certificate = try CurveCertificate.loadPublic(path: POSIX.path(directory, file))
            } catch {
                skipped.append("\(error.message); skipped")
                continue
            }
            let base = file.hasSuffix(".key") ? String(file.dropLast(4)) : file
            names[certificate.publicKey] = certificate.metadata["name"].flatMap { $0.isEmpty ? nil : $0 } ?? base
        }
        return Allowlist(directory: directory, names: names, skipped: skipped)
    }

    /// Leaves `key` out (a key in both allowlists is in neither).
    mutating func remove(_ key: String) { self.names[key] = nil }

    /// Whether `file` names a certificate: `NAME.key`, or czmq's `NAME` without an extension.
    static func isCertificateName(_ file: String) -> Bool {
        file.hasSuffix(".key") ? file.count > 4 : !file.contains(".")
    }

    /// The files in `directory`, sorted: regular files not starting with a dot, secret files
    /// (`*_secret`) left out.
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
