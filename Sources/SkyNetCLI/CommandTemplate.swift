package import SkyNet

/// `skynet submit --exec 'gzip -9 -k {}'`: a command template, split into arguments as a POSIX shell
/// splits words, with GNU parallel's replacement strings substituted in each argument.
///
/// Quoting: `'…'` is literal, `"…"` is literal except that `\"`, `\\`, `\$` and `` \` `` lose their
/// backslash, and a backslash outside quotes keeps the next character as it is. Nothing is expanded
/// (no `$VAR`, globs or `~`) and no shell runs: the words are the program's arguments. Replacement
/// strings: `{}` the input line, `{.}` without its extension, `{/}` its file name, `{//}` its
/// directory, `{/.}` its file name without extension, `{#}` the task's number (from 1). A template
/// with none of them gets the line as its last argument, as in GNU parallel.
package struct CommandTemplate: Sendable, Equatable {
    /// The words, before substitution.
    package let words: [String]
    /// Whether any word holds a replacement string.
    package let hasReplacements: Bool

    /// A template that cannot be split.
    package struct ParseError: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    static let replacements = ["{}", "{.}", "{/}", "{//}", "{/.}", "{#}"]

    /// Splits `template` into words.
    /// - Throws: ``ParseError`` for an unterminated quote, a trailing backslash, or no words.
    package init(_ template: String) throws(ParseError) {
        var words: [String] = []
        var word = ""
        var inWord = false
        var iterator = template.makeIterator()
        while let character = iterator.next() {
            switch character {
            case " ", "\t", "\n":
                if inWord { words.append(word) }
                (word, inWord) = ("", false)
            case "'", "\"":
                // Up to the closing quote; inside double quotes a backslash escapes " \ $ and `.
                inWord = true
                var closed = false
                while let next = iterator.next() {
                    if next == character {
                        closed = true
                        break
                    }
                    if character == "\"", next == "\\", let escaped = iterator.next() {
                        if !"\"\\$`".contains(escaped) { word.append("\\") }
                        word.append(escaped)
                    } else {
                        word.append(next)
                    }
                }
                guard closed else { throw ParseError(description: "--exec: a \(character) quote is not closed") }
            case "\\":
                guard let escaped = iterator.next() else {
                    throw ParseError(description: "--exec: the template ends in a backslash")
                }
                inWord = true
                word.append(escaped)
            default:
                inWord = true
                word.append(character)
            }
        }
        if inWord { words.append(word) }
        guard let first = words.first, !first.isEmpty else {
            throw ParseError(description: "--exec needs a command, e.g. --exec 'gzip -9 -k {}'")
        }
        self.words = words
        self.hasReplacements = words.contains { word in Self.replacements.contains { word.contains($0) } }
    }

    /// The arguments for input `line`, task number `sequence`.
    package func arguments(line: String, sequence: Int) -> [String] {
        guard self.hasReplacements else { return self.words + [line] }
        return self.words.map { Self.substitute($0, line: line, sequence: sequence) }
    }

    /// `word` with each replacement string replaced. Each value is worked out only where its token
    /// appears, on the line's UTF-8 bytes (`/` and `.` are single bytes): linear in the line, so a
    /// 16 MiB line is refused by the size check in milliseconds rather than seconds.
    static func substitute(_ word: String, line: String, sequence: Int) -> String {
        guard word.contains("{") else { return word }
        var out = ""
        var rest = word[...]
        while let open = rest.firstIndex(of: "{") {
            out += rest[..<open]
            rest = rest[open...]
            if let token = Self.replacements.first(where: { rest.hasPrefix($0) }) {
                out += Self.value(of: token, line: line, sequence: sequence)
                rest = rest.dropFirst(token.count)
            } else {
                out.append(rest.removeFirst())
            }
        }
        return out + rest
    }

    /// What replacement string `token` stands for, for input `line` and task number `sequence`.
    private static func value(of token: String, line: String, sequence: Int) -> String {
        switch token {
        case "{}": return line
        case "{.}": return Self.withoutExtension(line)
        case "{/}": return Self.name(line)
        case "{//}":
            guard let slash = line.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "." }
            return slash == line.startIndex ? "/" : String(line[..<slash])
        case "{/.}": return Self.withoutExtension(Self.name(line))
        default: return String(sequence)
        }
    }

    /// The file name in `path`: what follows its last `/`, or all of it.
    private static func name(_ path: String) -> String {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return path }
        return String(path[path.utf8.index(after: slash)...])
    }

    /// `path` without its extension: up to its last `.`, unless that dot starts it or a `/` follows.
    private static func withoutExtension(_ path: String) -> String {
        guard let dot = path.utf8.lastIndex(of: UInt8(ascii: ".")), dot != path.startIndex,
            !path.utf8[dot...].contains(UInt8(ascii: "/"))
        else { return path }
        return String(path[..<dot])
    }

    /// One `exec` task per line of `text`, numbered from 1, as GNU parallel reads its input: a
    /// blank line is a task (with `{}` empty), a final newline ends the last line rather than
    /// starting one, and a `\r` before a newline is dropped.
    /// - Throws: ``TaskFile/ParseError`` naming a line whose command cannot run
    ///   (``ExecRequest/problem``: a NUL byte in an argument).
    package func tasks(
        lines text: String,
        environment: [String: String],
        workingDirectory: String?,
        maxOutput: Int
    ) throws(TaskFile.ParseError) -> [ScanTask] {
        try self.tasks(
            lines: Self.lines(text),
            firstSequence: 1,
            environment: environment,
            workingDirectory: workingDirectory,
            maxOutput: maxOutput
        )
    }

    /// One `exec` task per line, numbered from `firstSequence` (lines read as they come).
    /// - Throws: ``TaskFile/ParseError`` naming a line whose command cannot run.
    package func tasks(
        lines: [String],
        firstSequence: Int,
        environment: [String: String],
        workingDirectory: String?,
        maxOutput: Int
    ) throws(TaskFile.ParseError) -> [ScanTask] {
        var tasks: [ScanTask] = []
        tasks.reserveCapacity(lines.count)
        for (offset, line) in lines.enumerated() {
            let sequence = firstSequence + offset
            let request = ExecRequest(
                self.arguments(line: line, sequence: sequence),
                environment: environment,
                workingDirectory: workingDirectory,
                sequence: sequence,
                maxOutput: maxOutput
            )
            if let problem = request.problem { throw TaskFile.ParseError(line: sequence, message: problem) }
            tasks.append(ScanTask(kind: ExecScanner.kind, input: request.scanBytes))
        }
        return tasks
    }

    /// The lines of `text`: split at each `\n`, a trailing `\r` dropped from each, no line after a
    /// final newline.
    static func lines(_ text: String) -> [String] {
        var lines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines.map { line in
            String(decoding: line.last == UInt8(ascii: "\r") ? line.dropLast() : line, as: UTF8.self)
        }
    }
}
