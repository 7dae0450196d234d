import Glibc

/// Small POSIX helpers the library and the command line share.
package enum POSIX {
    /// Writes all of `bytes` to `fd`, again after `EINTR` and short writes.
    /// - Returns: nil, or the `errno` of the write that failed.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            offset += n
        }
        return nil
    }

    /// `directory/name`, with one slash between them.
    package static func path(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
