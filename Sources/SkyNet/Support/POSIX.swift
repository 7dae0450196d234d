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

    /// Reads `fd` from its offset to the end.
    /// - Returns: the bytes, or the `errno` of the read that failed.
    package static func readAll(_ fd: Int32) -> Result<[UInt8], POSIXErrno> {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(POSIXErrno(code: errno))
            }
            if n == 0 { return .success(bytes) }
            bytes.append(contentsOf: chunk[0..<n])
        }
    }

    /// `directory/name`, with one slash between them.
    package static func path(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}

/// An `errno` value, as an error.
package struct POSIXErrno: Error, Sendable {
    package let code: Int32
}
