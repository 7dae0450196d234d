package import SkyNet

// The line a final result prints, written as bytes into the caller's buffer: `skynet submit` prints
// one per task, and built from Strings the JSON line alone cost ~24,000 instructions per task (string
// growth, a scalar at a time through `quote`), more than everything else the coordinator does for it.
// The String forms (``JobReporter/human(_:)``, ``JobReporter/quote(_:)``) stay the reference: a test
// checks that these write the same bytes.
extension JobReporter {
    /// Appends a completed or other non-command result's human line (``human(_:)`` and a newline).
    package static func appendHumanLine(_ result: FinalResult, to line: inout [UInt8]) {
        guard result.status == .completed, !result.task.isCommand else {
            line.append(contentsOf: (Self.human(result) + "\n").utf8)
            return
        }
        // Written on the stack and appended at once: seven appends to the array cost ~610
        // instructions a line, this ~550 (each write is a call into SkyNetCore, not inlined).
        result.system.withUTF8Bytes { name in
            // "Completed: " 11, the sector (21) or the id (36), " by " 4, the name, " (attempt " 10,
            // the attempts (21), ")\n" 2.
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 84 + name.count) { buffer in
                var at = 0
                buffer.write("Completed: ", at: &at)
                if let sector = result.task.sectorNumber {
                    buffer.writeDecimal(sector, at: &at)
                } else {
                    result.task.id.withText { buffer.write($0, at: &at) }
                }
                buffer.write(" by ", at: &at)
                buffer.write(UnsafeRawBufferPointer(name), at: &at)
                if result.attempts > 1 {
                    buffer.write(" (attempt ", at: &at)
                    buffer.writeDecimal(Int64(result.attempts), at: &at)
                    buffer.write(")", at: &at)
                }
                buffer.write("\n", at: &at)
                line.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<at]))
            }
        }
    }

    /// Appends a non-command result's `--json` line: `{"id","sector","status","attempts","system","result"}`,
    /// `"kind"` for a kind other than `sector`, `"error"` when it has one, and a newline.
    package static func appendJSONLine(_ result: FinalResult, to line: inout [UInt8]) {
        if Self.appendShortJSONLine(result, to: &line) { return }
        Self.appendJSONLineFieldByField(result, to: &line)
    }

    /// The common line (a sector task without an error, its system name and output ASCII and short)
    /// written on the stack and appended at once, as the human line is: field by field it took
    /// about fifteen appends to the array, ~100 instructions each whatever they copy. Returns false,
    /// having appended nothing, for any other result.
    private static func appendShortJSONLine(_ result: FinalResult, to line: inout [UInt8]) -> Bool {
        guard !result.hasError, result.task.kind == SectorScanner.kind, result.output.count <= 256,
            let sector = result.task.sectorNumber
        else { return false }
        return result.system.withUTF8Bytes { system in
            guard system.count <= ProtocolLimits.nameLength else { return false }
            return result.output.withUnsafeBytes { output in
                // The fixed text and numbers take at most 170 bytes; a quoted byte at most 6.
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 176 + 6 * (system.count + output.count)) {
                    buffer in
                    var at = 0
                    buffer.write("{\"id\":\"", at: &at)
                    result.task.id.withText { buffer.write($0, at: &at) }
                    buffer.write("\",\"sector\":", at: &at)
                    buffer.writeDecimal(sector, at: &at)
                    switch result.status {
                    case .completed: buffer.write(",\"status\":\"completed\",\"attempts\":", at: &at)
                    case .failed: buffer.write(",\"status\":\"failed\",\"attempts\":", at: &at)
                    case .cancelled: buffer.write(",\"status\":\"cancelled\",\"attempts\":", at: &at)
                    }
                    buffer.writeDecimal(Int64(result.attempts), at: &at)
                    buffer.write(",\"system\":", at: &at)
                    guard Self.writeQuotedASCII(UnsafeRawBufferPointer(system), into: buffer, at: &at) else {
                        return false
                    }
                    buffer.write(",\"result\":", at: &at)
                    if result.status == .completed {
                        guard Self.writeQuotedASCII(output, into: buffer, at: &at) else { return false }
                    } else {
                        buffer.write("null", at: &at)
                    }
                    buffer.write("}\n", at: &at)
                    line.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<at]))
                    return true
                }
            }
        }
    }

    /// Writes ASCII `bytes` at `at` as ``appendQuoted(utf8:to:)`` appends them (room: 2 + 6 per
    /// byte); false at the first byte that is not ASCII (what was written is then to be dropped).
    private static func writeQuotedASCII(
        _ bytes: UnsafeRawBufferPointer,
        into buffer: UnsafeMutableBufferPointer<UInt8>,
        at: inout Int
    ) -> Bool {
        buffer[at] = UInt8(ascii: "\"")
        at += 1
        for byte in bytes {
            if byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") {
                buffer[at] = byte
                at += 1
                continue
            }
            guard byte < 0x80 else { return false }
            Self.writeEscape(byte, into: buffer, at: &at)
        }
        buffer[at] = UInt8(ascii: "\"")
        at += 1
        return true
    }

    /// Writes the JSON escape of `byte` (`"`, `\` or a control character) at `at`: `\"`, `\\`, `\n`,
    /// `\r`, `\t`, or `\u00XX` for the other control characters (room: 6 bytes). The one rule for both
    /// the array writer and the stack writer.
    private static func writeEscape(_ byte: UInt8, into buffer: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        buffer[at] = UInt8(ascii: "\\")
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"):
            buffer[at + 1] = byte
            at += 2
        case UInt8(ascii: "\n"):
            buffer[at + 1] = UInt8(ascii: "n")
            at += 2
        case UInt8(ascii: "\r"):
            buffer[at + 1] = UInt8(ascii: "r")
            at += 2
        case UInt8(ascii: "\t"):
            buffer[at + 1] = UInt8(ascii: "t")
            at += 2
        default:
            buffer[at + 1] = UInt8(ascii: "u")
            buffer[at + 2] = UInt8(ascii: "0")
            buffer[at + 3] = UInt8(ascii: "0")
            buffer[at + 4] = Self.hexDigit(byte >> 4)
            buffer[at + 5] = Self.hexDigit(byte & 0xF)
            at += 6
        }
    }

    /// ``appendJSONLine(_:to:)`` one field at a time: any result (a test checks that both write the same).
    package static func appendJSONLineFieldByField(_ result: FinalResult, to line: inout [UInt8]) {
        line.append("{\"id\":\"")
        result.task.id.appendText(to: &line)
        line.append("\",\"sector\":")
        if let sector = result.task.sectorNumber { line.appendDecimal(sector) } else { line.append("null") }
        if result.task.kind != SectorScanner.kind {
            line.append(",\"kind\":")
            Self.appendQuoted(result.task.kind, to: &line)
        }
        line.append(",\"status\":\"")
        switch result.status {
        case .completed: line.append("completed")
        case .failed: line.append("failed")
        case .cancelled: line.append("cancelled")
        }
        line.append("\",\"attempts\":")
        line.appendDecimal(Int64(result.attempts))
        line.append(",\"system\":")
        Self.appendQuoted(result.system, to: &line)
        line.append(",\"result\":")
        if result.status == .completed {
            Self.appendQuoted(output: result.output, to: &line)
        } else {
            line.append("null")
        }
        if let error = result.error {
            line.append(",\"error\":")
            Self.appendQuoted(error, to: &line)
        }
        line.append("}\n")
    }

    /// Appends `text` as a JSON string literal, as ``quote(_:)`` writes it.
    package static func appendQuoted(_ text: String, to out: inout [UInt8]) {
        text.withUTF8Bytes { Self.appendQuoted(utf8: UnsafeRawBufferPointer($0), to: &out) }
    }

    /// Appends a scan's output as a JSON string literal, as ``quote(_:)`` writes ``FinalResult/outputText``
    /// (which reads bytes that are not UTF-8 as U+FFFD).
    static func appendQuoted(output bytes: [UInt8], to out: inout [UInt8]) {
        let valid = bytes.withUnsafeBytes { raw in
            // ASCII (every sector scan's output) needs no further check.
            raw.allSatisfy { $0 < 0x80 } || String(validating: raw, as: UTF8.self) != nil
        }
        guard valid else {
            Self.appendQuoted(String(decoding: bytes, as: UTF8.self), to: &out)
            return
        }
        bytes.withUnsafeBytes { Self.appendQuoted(utf8: $0, to: &out) }
    }

    /// Appends valid UTF-8 as a JSON string literal: `"` and `\` escaped, and the control characters
    /// (`\n`, `\r`, `\t`, the others as `\u00XX`); every other byte as it is, in runs.
    private static func appendQuoted(utf8 bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var start = 0
        for index in bytes.indices {
            let byte = bytes[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if start < index { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<index])) }
            start = index + 1
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 6) { escape in
                var count = 0
                Self.writeEscape(byte, into: escape, at: &count)
                out.append(contentsOf: UnsafeBufferPointer(rebasing: escape[..<count]))
            }
        }
        if start < bytes.count { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start...])) }
        out.append(UInt8(ascii: "\""))
    }

    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }
}

extension Array where Element == UInt8 {
    /// Appends a literal's UTF-8 bytes at once (the generic `append(contentsOf:)` of a
    /// `String.UTF8View` cost ~160 instructions a call).
    @inline(__always)
    package mutating func append(_ text: StaticString) {
        text.withUTF8Buffer { self.append(contentsOf: $0) }
    }

    /// Appends `text`'s UTF-8 bytes at once.
    @inline(__always)
    package mutating func appendUTF8(of text: String) {
        text.withUTF8Bytes { self.append(contentsOf: $0) }
    }
}

extension ScanTask {
    /// Whether this is a command (`exec`) task. The kind's length first: the usual kinds are then
    /// told apart without a String comparison (~22 instructions each: twice per printed result, and
    /// twice per task when `skynet submit` looks for commands among a job's tasks).
    package var isCommand: Bool { self.kind.utf8.count == 4 && self.kind == ExecScanner.kind }
}

extension [ScanTask] {
    /// Whether any of the tasks is a command, each looked at where it lies (through `pointee`, an
    /// addressor): `contains` copied every task out of the array, its input retained and released
    /// (~80 instructions a task, twice for `skynet submit`).
    package var hasCommands: Bool {
        self.withUnsafeBufferPointer { tasks in
            guard let base = tasks.baseAddress else { return false }
            for offset in 0..<tasks.count where base.advanced(by: offset).pointee.isCommand { return true }
            return false
        }
    }
}
