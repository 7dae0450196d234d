package import SkyNet
import Foundation

/// Reads a JSON Lines file of tasks for `skynet submit --tasks FILE.jsonl`.
///
/// One JSON object per line; blank lines and lines starting with `#` are skipped:
///
/// ```
/// {"sector": 9}
/// {"sector": 10, "work": "250ms", "fail_every": 0, "priority": 5, "id": "6f1c…"}
/// {"kind": "echo", "input": "any text"}
/// {"exec": ["gzip", "-9", "-k", "big.log"], "timeout": "10s", "env": {"LEVEL": "9"}}
/// ```
///
/// Fields: `sector` (integer, for kind `sector`, the default), `kind`, `input` (text, for other kinds),
/// `work` and `fail_every` (sector options; default to the command's `--work`/`--fail-every`),
/// `priority` (integer), `timeout` (duration), `id` (UUID; a new one when absent); for a command,
/// `exec` (the program and its arguments, no shell), `env` (variables, added to the command line's
/// `--env`) and `workdir`. Unknown fields, wrong types and duplicate ids are errors naming the line.
package enum TaskFile {
    package struct ParseError: Error, Sendable, CustomStringConvertible {
        package let line: Int
        package let message: String
        package var description: String { "line \(self.line): \(self.message)" }
    }

    private static let knownFields: Set<String> = [
        "sector", "kind", "input", "work", "fail_every", "priority", "timeout", "id", "exec", "env", "workdir",
    ]

    /// What `exec` lines get unless they say otherwise: `--env`, `--workdir` and `--max-output`.
    package struct ExecDefaults: Sendable {
        package var environment: [String: String]
        package var workingDirectory: String?
        package var maxOutput: Int
        package init(
            environment: [String: String] = [:],
            workingDirectory: String? = nil,
            maxOutput: Int = ExecRequest.defaultMaxOutput
        ) {
            self.environment = environment
            self.workingDirectory = workingDirectory
            self.maxOutput = maxOutput
        }
    }

    /// Parses the file's text.
    /// - Parameters:
    ///   - defaultWork: `work` for sector tasks that give none.
    ///   - defaultFailEvery: `fail_every` for sector tasks that give none.
    /// - Throws: ``ParseError`` for the first bad line.
    package static func parse(
        _ text: String,
        defaultWork: Duration,
        defaultFailEvery: Int,
        exec: ExecDefaults = ExecDefaults()
    ) throws(ParseError) -> [ScanTask] {
        var tasks: [ScanTask] = []
        var seen: Set<TaskID> = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            let line = String(rawLine).trimmingSpaces()
            if line.isEmpty || line.hasPrefix("#") { continue }
            func fail(_ message: String) -> ParseError { ParseError(line: number, message: message) }
            guard let object = try? JSONDecoder().decode([String: JSONValue].self, from: Data(line.utf8)) else {
                throw fail("not a JSON object")
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
            let kind = try string("kind") ?? (object["exec"] != nil ? ExecScanner.kind : SectorScanner.kind)
            guard !kind.isEmpty, kind.utf8.count <= ProtocolLimits.kindLength else {
                throw fail("\"kind\" must be 1 to \(ProtocolLimits.kindLength) bytes")
            }
            var task: ScanTask
            if kind != ExecScanner.kind, object["exec"] != nil || object["env"] != nil || object["workdir"] != nil {
                throw fail("\"exec\", \"env\" and \"workdir\" are for exec tasks")
            }
            if kind == ExecScanner.kind {
                guard case .array(let words) = object["exec"], !words.isEmpty else {
                    throw fail("an exec task needs \"exec\": [\"program\", \"argument\", …]")
                }
                let arguments = try words.map { word throws(ParseError) in
                    guard case .string(let text) = word else { throw fail("\"exec\" must be an array of strings") }
                    return text
                }
                guard !arguments[0].isEmpty else { throw fail("\"exec\" names no program") }
                var environment = exec.environment
                if let env = object["env"] {
                    guard case .object(let variables) = env else { throw fail("\"env\" must be an object of strings") }
                    for (name, value) in variables {
                        guard case .string(let text) = value else {
                            throw fail("\"env\" value of \(name) must be a string")
                        }
                        environment[name] = text
                    }
                }
                for key in ["sector", "input", "work", "fail_every"] where object[key] != nil {
                    throw fail("\"\(key)\" is not for exec tasks")
                }
                let request = ExecRequest(
                    arguments,
                    environment: environment,
                    workingDirectory: try string("workdir") ?? exec.workingDirectory,
                    sequence: tasks.count + 1,
                    maxOutput: exec.maxOutput
                )
                if let problem = request.problem { throw fail(problem) }
                task = ScanTask(kind: ExecScanner.kind, input: request.scanBytes)
            } else if kind == SectorScanner.kind {
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
private enum JSONValue: Decodable {
    case integer(Int)
    case number(Double)
    case string(String)
    case bool(Bool)
    case array([JSONValue])
    case object([String: JSONValue])
    case null

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
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
