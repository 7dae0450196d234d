public import SkyNet
import Foundation

/// Reads a JSON Lines file of tasks for `skynet submit --tasks FILE.jsonl`.
///
/// One JSON object per line; blank lines and lines starting with `#` are skipped:
///
/// ```
/// {"sector": 9}
/// {"sector": 10, "work": "250ms", "fail_every": 0, "priority": 5, "id": "6f1c…"}
/// {"kind": "echo", "input": "any text"}
/// ```
///
/// Fields: `sector` (integer, for kind `sector`, the default), `kind`, `input` (text, for other kinds),
/// `work` and `fail_every` (sector options; default to the command's `--work`/`--fail-every`),
/// `priority` (integer), `timeout` (duration), `id` (UUID; a new one when absent). Unknown fields,
/// wrong types and duplicate ids are errors naming the line.
public enum TaskFile {
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public let line: Int
        public let message: String
        public var description: String { "line \(self.line): \(self.message)" }
    }

    private static let knownFields: Set<String> = [
        "sector", "kind", "input", "work", "fail_every", "priority", "timeout", "id",
    ]

    /// Parses the file's text.
    /// - Parameters:
    ///   - defaultWork: `work` for sector tasks that give none.
    ///   - defaultFailEvery: `fail_every` for sector tasks that give none.
    /// - Throws: ``ParseError`` for the first bad line.
    public static func parse(
        _ text: String,
        defaultWork: Duration,
        defaultFailEvery: Int
    ) throws(ParseError) -> [ScanTask] {
        var tasks: [ScanTask] = []
        var seen: Set<TaskID> = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            let line = String(rawLine).trimmingSpaces()
            if line.isEmpty || line.hasPrefix("#") { continue }
            func fail(_ message: String) -> ParseError { ParseError(line: number, message: message) }
            guard let object = try? JSONDecoder().decode([String: JSONScalar].self, from: Data(line.utf8)) else {
                throw fail("not a JSON object of numbers and strings")
            }
            if let unknown = object.keys.sorted().first(where: { !Self.knownFields.contains($0) }) {
                throw fail("unknown field \"\(unknown)\" (known: \(Self.knownFields.sorted().joined(separator: ", ")))")
            }
            func integer(_ key: String) throws(ParseError) -> Int? {
                guard let value = object[key] else { return nil }
                guard case .integer(let exact) = value else { throw fail("\"\(key)\" must be an integer") }
                return exact
            }
            func string(_ key: String) throws(ParseError) -> String? {
                guard let value = object[key] else { return nil }
                guard case .string(let text) = value else { throw fail("\"\(key)\" must be a string") }
                return text
            }
            func duration(_ key: String) throws(ParseError) -> Duration? {
                guard let text = try string(key) else { return nil }
                guard let parsed = DurationParser.parse(text) else {
                    throw fail("\"\(key)\" is not a duration like \"250ms\", \"1s\" or \"2m\": \(text)")
                }
                return parsed
            }
            let kind = try string("kind") ?? SectorScanner.kind
            guard !kind.isEmpty, kind.utf8.count <= ProtocolLimits.kindLength else {
                throw fail("\"kind\" must be 1 to \(ProtocolLimits.kindLength) bytes")
            }
            var task: ScanTask
            if kind == SectorScanner.kind {
                guard let sector = try integer("sector") else { throw fail("a sector task needs \"sector\"") }
                if object["input"] != nil { throw fail("a sector task takes \"sector\", not \"input\"") }
                let failEvery = try integer("fail_every") ?? defaultFailEvery
                guard failEvery >= 0 else { throw fail("\"fail_every\" must be 0 or more") }
                task = .sector(sector, work: try duration("work") ?? defaultWork, failEvery: failEvery)
            } else {
                guard let input = try string("input") else { throw fail("a \(kind) task needs \"input\"") }
                if object["sector"] != nil || object["work"] != nil || object["fail_every"] != nil {
                    throw fail("\"sector\", \"work\" and \"fail_every\" are for sector tasks")
                }
                task = ScanTask(kind: kind, input: Array(input.utf8))
            }
            if let priority = try integer("priority") {
                guard let exact = Int32(exactly: priority) else { throw fail("\"priority\" is out of range") }
                task.priority = exact
            }
            task.timeout = try duration("timeout")
            if let idText = try string("id") {
                guard let id = TaskID(idText) else { throw fail("\"id\" is not a UUID: \(idText)") }
                task.id = id
            }
            guard seen.insert(task.id).inserted else { throw fail("duplicate id \(task.id)") }
            tasks.append(task)
        }
        return tasks
    }
}

/// A JSON value a task line may hold.
private enum JSONScalar: Decodable {
    case integer(Int)
    case number(Double)
    case string(String)
    case bool(Bool)
    case null

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else {
            self = .string(try container.decode(String.self))
        }
    }
}
