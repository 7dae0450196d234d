import Foundation
import Glibc
import SkyNet

/// Reads lines from a pipe, a FIFO or a terminal as they come, on a thread of its own (a read that
/// waits must not hold one of the few threads of Swift's pool), and hands them on in chunks: each
/// chunk is the complete lines one `read` brought. Lines are split as ``CommandTemplate/lines(_:)``
/// splits them (blank lines kept, a `\r` before `\n` dropped, no line after a final newline).
package enum LineReader {
    /// A bad line: not UTF-8 text. Its number counts from 1.
    package struct BadLine: Error, CustomStringConvertible {
        package let line: Int
        package let message: String
        package var description: String { "line \(self.line): \(self.message)" }
    }

    /// The lines of `fd` in chunks, as they arrive; the stream ends at end-of-file, or fails with a
    /// ``BadLine`` or the read's error. The descriptor is closed at the end unless it is standard
    /// input.
    package static func chunks(of fd: Int32) -> AsyncThrowingStream<[String], any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [String].self)
        let thread = Thread {
            defer { if fd != STDIN_FILENO { close(fd) } }
            var pending: [UInt8] = []
            var number = 0
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            func emit(_ lines: [ArraySlice<UInt8>]) -> Bool {
                var chunk: [String] = []
                chunk.reserveCapacity(lines.count)
                for var line in lines {
                    number += 1
                    if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                    guard let text = String(validating: line, as: UTF8.self) else {
                        continuation.finish(throwing: BadLine(line: number, message: "is not UTF-8 text"))
                        return false
                    }
                    chunk.append(text)
                }
                if !chunk.isEmpty { continuation.yield(chunk) }
                return true
            }
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    continuation.finish(throwing: BadLine(line: number + 1, message: String(cString: strerror(errno))))
                    return
                }
                if n == 0 {
                    if !pending.isEmpty, !emit([pending[...]]) { return }
                    continuation.finish()
                    return
                }
                pending.append(contentsOf: buffer[0..<n])
                guard let last = pending.lastIndex(of: UInt8(ascii: "\n")) else { continue }
                let lines = pending[..<last].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
                guard emit(lines) else { return }
                pending.removeFirst(last + 1)
            }
        }
        thread.name = "skynet-inputs"
        thread.start()
        return stream
    }
}
