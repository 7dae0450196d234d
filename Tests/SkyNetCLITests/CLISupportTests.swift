import Foundation
import Testing

@testable import SkyNet
@testable import SkyNetCore
@testable import SkyNetCLI

@Suite("Task files, durations, endpoints and output")
struct CLISupportTests {
    @Test("durations in whole units: rounded down, never negative (ns saturating), short and long alike")
    func durationUnits() {
        let cases: [(Duration, milliseconds: Int64, microseconds: Int64, nanoseconds: Int64)] = [
            (.zero, 0, 0, 0), (.nanoseconds(1999), 0, 1, 1999), (.microseconds(2_500), 2, 2_500, 2_500_000),
            // Past 2^63 attoseconds (~9.2 s): the 128-bit path.
            (.seconds(10) + .nanoseconds(7), 10_000, 10_000_000, 10_000_000_007),
            (.seconds(86_400 * 365), 31_536_000_000, 31_536_000_000_000, 31_536_000_000_000_000),
            (.nanoseconds(-1500), 0, 0, -1500), (.seconds(-20), 0, 0, -20_000_000_000),
            (.seconds(Int64.max), Int64.max, Int64.max, Int64.max), (.seconds(Int64.min), 0, 0, Int64.min),
        ]
        for (duration, milliseconds, microseconds, nanoseconds) in cases {
            #expect(duration.milliseconds == milliseconds, "\(duration)")
            #expect(duration.microseconds == microseconds, "\(duration)")
            #expect(duration.nanoseconds == nanoseconds, "\(duration)")
        }
    }

    @Test("durations: ms, s, m, h, fractions; junk is refused")
    func durations() {
        #expect(DurationParser.parse("250ms") == .milliseconds(250))
        #expect(DurationParser.parse("1s") == .seconds(1))
        #expect(DurationParser.parse("1.5s") == .milliseconds(1500))
        #expect(DurationParser.parse("2m") == .seconds(120))
        #expect(DurationParser.parse("0ms") == .zero)
        #expect(DurationParser.parse("0") == .zero)
        #expect(DurationParser.parse("500us") == .microseconds(500))
        for bad in ["", "1", "ms", "-1s", "1x", "1.2.3s", "1e3s", "nan s", "1 s s"] {
            #expect(DurationParser.parse(bad) == nil, "\(bad)")
        }
        #expect(DurationParser.format(.milliseconds(250)) == "250ms")
        #expect(DurationParser.format(.seconds(5)) == "5s")
        // For people: rounded to whole microseconds, tenths or whole units, and what parse reads back.
        let described: [(Duration, String)] = [
            (.zero, "0ms"), (.nanoseconds(300), "1us"), (.microseconds(850), "850us"),
            (.microseconds(999_600), "1s"), (.microseconds(999), "999us"), (.nanoseconds(999_600), "1ms"),
            (.microseconds(4884), "4.9ms"), (.milliseconds(5), "5ms"), (.microseconds(9960), "10ms"),
            (.microseconds(123_400), "123ms"), (.milliseconds(1500), "1.5s"), (.milliseconds(2000), "2s"),
            (.milliseconds(42_400), "42s"),
        ]
        for (duration, text) in described {
            #expect(DurationParser.describe(duration) == text, "\(duration)")
            #expect(DurationParser.parse(text) != nil, "\(text)")
        }
        #expect(DurationParser.format(.microseconds(200)) == "200us")
        #expect(DurationParser.format(.microseconds(1500)) == "1500us")
        #expect(DurationParser.format(.zero) == "0ms")
        for duration: Duration in [.microseconds(200), .microseconds(1500), .milliseconds(10), .zero] {
            #expect(DurationParser.parse(DurationParser.format(duration)) == duration)
        }
    }

    @Test("endpoints are checked before libzmq sees them")
    func endpoints() {
        #expect(Endpoint.problem(with: "tcp://*:5555", binding: true) == nil)
        #expect(Endpoint.problem(with: "tcp://127.0.0.1:*", binding: true) == nil)
        #expect(Endpoint.problem(with: "tcp://127.0.0.1:*", binding: false) != nil)
        #expect(Endpoint.problem(with: "tcp://host", binding: false) != nil)
        #expect(Endpoint.problem(with: "tcp://host:99999", binding: false) != nil)
        #expect(Endpoint.problem(with: "localhost:5555", binding: false) != nil)
        // An empty value is said to be empty (it read "--frontend:  is not an endpoint").
        #expect(Endpoint.problem(with: "", binding: true)?.hasPrefix("an empty value is not an endpoint") == true)
        #expect(Endpoint.problem(with: "udp://x:1", binding: false) != nil)
        #expect(Endpoint.problem(with: "ipc:///tmp/skynet", binding: true) == nil)
    }

    @Test("a task file gives sector and other tasks with their options")
    func taskFile() throws {
        let text = """
            {"sector": 9}
            # a comment

            {"sector": 10, "work": "250ms", "fail_every": 4, "priority": 5, "timeout": "2s", "id": "01234567-89ab-4def-8123-456789abcdef"}
            {"kind": "echo", "input": "hello"}
            """
        let tasks = try TaskFile.parse(text, defaultWork: .seconds(1), defaultFailEvery: 0)
        #expect(tasks.count == 3)
        #expect(tasks[0].sector == 9)
        #expect(try SectorInput.decode(tasks[0].input).work == .seconds(1))
        #expect(
            try SectorInput.decode(tasks[1].input) == SectorInput(sector: 10, work: .milliseconds(250), failEvery: 4)
        )
        #expect(tasks[1].priority == 5 && tasks[1].timeout == .seconds(2))
        #expect(tasks[1].id.description == "01234567-89ab-4def-8123-456789abcdef")
        #expect(tasks[2].kind == "echo" && tasks[2].input == Array("hello".utf8))
    }

    @Test(
        "a bad task file names the line and the problem",
        arguments: [
            ("{\"sector\": 1}\nnot json", "line 2: not a JSON object"),
            ("{\"sectr\": 1}", "unknown field \"sectr\""),
            ("{\"sector\": \"9\"}", "\"sector\" must be an integer"),
            ("{\"sector\": 1.5}", "\"sector\" must be an integer"),
            ("{\"sector\": true}", "\"sector\" must be an integer"),
            ("{}", "a sector task needs \"sector\""),
            ("{\"sector\": 1, \"work\": \"fast\"}", "\"work\" is not a duration"),
            ("{\"sector\": 1, \"id\": \"x\"}", "\"id\" is not a UUID"),
            ("{\"kind\": \"echo\"}", "a echo task needs \"input\""),
            ("{\"sector\": 1, \"fail_every\": -1}", "\"fail_every\" must be 0 or more"),
            (
                "{\"sector\": 1, \"id\": \"01234567-89ab-4def-8123-456789abcdef\"}\n{\"sector\": 2, \"id\": \"01234567-89ab-4def-8123-456789abcdef\"}",
                "line 2: duplicate id"
            ),
            ("[1, 2]", "line 1: not a JSON object"),
        ]
    )
    func badTaskFile(_ text: String, _ message: String) {
        do {
            _ = try TaskFile.parse(text, defaultWork: .zero, defaultFailEvery: 0)
            Issue.record("\(text) should not parse")
        } catch {
            #expect(error.description.contains(message), "\(error.description)")
        }
    }

    @Test("JSON output has the contract's fields and escapes text")
    func jsonOutput() {
        let task = ScanTask.sector(9, id: TaskID(high: 1, low: 2))
        let completed = FinalResult(
            task: task,
            status: .completed,
            attempts: 2,
            system: "local",
            output: Array("sector 9: 1 \"x\"\n".utf8)
        )
        #expect(
            JobReporter.json(completed)
                == "{\"id\":\"00000000-0000-0001-0000-000000000002\",\"sector\":9,\"status\":\"completed\",\"attempts\":2,\"system\":\"local\",\"result\":\"sector 9: 1 \\\"x\\\"\\n\"}"
        )
        let failed = FinalResult(task: task, status: .failed, attempts: 3, system: "w", error: "bad\u{1}")
        #expect(JobReporter.json(failed).hasSuffix("\"result\":null,\"error\":\"bad\\u0001\"}"))
        #expect(JobReporter.human(completed) == "Completed: 9 by local (attempt 2)")
        // Written as bytes: an output that is not UTF-8 prints as `outputText` reads it (U+FFFD for
        // the bad byte), one that is as it is; control characters, `\` and `"` escaped everywhere.
        let noop = ScanTask(id: TaskID(high: 0xABCD, low: .max), kind: "no\"op", input: [])
        let bad = FinalResult(
            task: noop,
            status: .completed,
            attempts: 1,
            system: "w\\é",
            output: [0x61, 0xFF, 0x1F, 0xE2, 0x82, 0xAC]
        )
        #expect(
            JobReporter.json(bad)
                == "{\"id\":\"00000000-0000-abcd-ffff-ffffffffffff\",\"sector\":null,\"kind\":\"no\\\"op\","
                + "\"status\":\"completed\",\"attempts\":1,\"system\":\"w\\\\é\",\"result\":\"a\u{FFFD}\\u001f€\"}"
        )
        let good = FinalResult(
            task: noop,
            status: .completed,
            attempts: 1,
            system: "w",
            output: [0x1F, 0xE2, 0x82, 0xAC, 0x5C]
        )
        #expect(JobReporter.json(good).hasSuffix(",\"result\":\"\\u001f€\\\\\"}"))
        #expect(JobReporter.quote("tab\tend\u{7}") == "\"tab\\tend\\u0007\"")
        // The byte writer quotes as `quote` does, every control character, quote, backslash and
        // multi-byte character included; an output that is not UTF-8 as `outputText` reads it.
        let samples = [
            "", "plain", "\"\\\n\r\t", "é€😀", "a\u{0}b\u{1f}c\u{7f}",
            String(decoding: (0..<128).map { UInt8($0) }, as: UTF8.self),
        ]
        for text in samples {
            var bytes: [UInt8] = []
            JobReporter.appendQuoted(text, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == JobReporter.quote(text))
        }
        for output: [UInt8] in [[0xFF], [0x61, 0xC3], [0xE2, 0x82, 0xAC, 0x00], Array("ok".utf8)] {
            var bytes: [UInt8] = []
            JobReporter.appendQuoted(output: output, to: &bytes)
            #expect(
                String(decoding: bytes, as: UTF8.self) == JobReporter.quote(String(decoding: output, as: UTF8.self))
            )
        }
        // The bytes written straight for the common lines say what the String form says.
        let other = ScanTask(id: TaskID(high: 3, low: 4), kind: "noop", input: [1])
        for result in [
            completed, failed,
            FinalResult(
                task: .sector(-12, id: TaskID(high: 5, low: 6)),
                status: .completed,
                attempts: 1,
                system: "w-é"
            ),
            FinalResult(task: other, status: .completed, attempts: 1, system: "x"),
            FinalResult(task: other, status: .cancelled, attempts: 1, system: "x"),
            // The widest line: the longest sector number and attempt count, a long system name.
            FinalResult(
                task: .sector(.min, id: TaskID(high: 7, low: 8)),
                status: .completed,
                attempts: .max,
                system: String(repeating: "w", count: 255)
            ),
            FinalResult(task: other, status: .completed, attempts: .max, system: String(repeating: "é", count: 100)),
        ] {
            #expect(JobReporter.humanLine(result) == Array((JobReporter.human(result) + "\n").utf8))
        }
        // The `--json` line written on the stack says what the field-by-field writer says, for the
        // results it takes (sector tasks, no error, short ASCII) and those it leaves to it.
        let allBytes = (0..<128).map { UInt8($0) }
        var jsonResults: [FinalResult] = [completed, failed]
        for output: [UInt8] in [
            [], Array("sector 7: 3 stars".utf8), allBytes, Array(allBytes.reversed()),
            [0x22, 0x5C, 0x0A, 0x0D, 0x09, 0x00, 0x1F, 0x7F], [0x61, 0xC3, 0xA9], [0xFF],
            Array(repeating: 0x41, count: 256), Array(repeating: 0x22, count: 256), Array(repeating: 0x41, count: 257),
        ] {
            for system in [
                "w", "w-é", "a\"b\\c\u{1}", String(repeating: "s", count: 128), String(repeating: "\u{1}", count: 128),
                String(repeating: "s", count: 129),
            ] {
                for status in [FinalResult.Status.completed, .failed, .cancelled] {
                    jsonResults.append(
                        FinalResult(
                            task: .sector(.min, id: TaskID(high: .max, low: 0)),
                            status: status,
                            attempts: .max,
                            system: system,
                            output: output
                        )
                    )
                }
            }
        }
        jsonResults.append(FinalResult(task: other, status: .completed, attempts: 1, system: "x", output: [0x41]))
        var withError = FinalResult(task: .sector(3), status: .failed, attempts: 2, system: "x")
        withError.error = "it \"broke\""
        jsonResults.append(withError)
        for result in jsonResults {
            var fast: [UInt8] = [0x2A]
            var slow: [UInt8] = [0x2A]
            JobReporter.appendJSONLine(result, to: &fast)
            JobReporter.appendJSONLineFieldByField(result, to: &slow)
            #expect(fast == slow, "\(String(decoding: slow, as: UTF8.self))")
        }
        var summary = JobSummary()
        summary.tasks = 2
        summary.completed = 2
        summary.wall = .milliseconds(500)
        let reporter = JobReporter(format: .json, total: 2)
        #expect(
            reporter.summary(summary)
                == "{\"summary\":{\"tasks\":2,\"completed\":2,\"failed\":0,\"cancelled\":0,\"retried\":0,\"retried_locally\":0,\"requeued\":0,\"duplicates\":0,\"from_cache\":0,\"identical\":0,\"not_recorded\":0,\"wall_s\":0.5,\"tasks_per_s\":4,\"dead_letter\":[]}}"
        )
    }

    @Test("a retry line says where the task runs next and how long it waits, rounded for people")
    func retryLine() {
        let task = ScanTask.sector(10, id: TaskID(high: 0, low: 10))
        var reporter = JobReporter(format: .human, total: 1)
        let line = reporter.render([
            .retrying(
                task,
                failedAttempt: 1,
                system: "worker-a",
                reason: "UnreliableAPI",
                placement: .local,
                delay: .microseconds(4884)
            )
        ])
        #expect(line == "Retrying: 10 failed on worker-a (attempt 1: UnreliableAPI); re-running locally in 4.9ms\n")
        let atOnce = reporter.render([
            .retrying(task, failedAttempt: 2, system: "local", reason: "x", placement: .remote, delay: .zero)
        ])
        #expect(atOnce == "Retrying: 10 failed on local (attempt 2: x); resubmitting\n")
        var json = JobReporter(format: .json, total: 1)
        #expect(
            json.render([.retrying(task, failedAttempt: 1, system: "w", reason: "x", placement: .local, delay: .zero)])
                .isEmpty
        )
    }

    @Test("the dead-letter report lists failed tasks with their last error, for humans and in JSON")
    func deadLetters() throws {
        var ledger = RetryLedger(policy: .none(maxAttempts: 1))
        let good = ScanTask.sector(1, id: TaskID(high: 0, low: 1))
        let bad = ScanTask.sector(2, id: TaskID(high: 0, low: 2))
        _ = ledger.add(good)
        _ = ledger.add(bad)
        _ = ledger.record(good.id, attempt: 1, outcome: .completed([]), system: "w")
        _ = ledger.record(bad.id, attempt: 1, outcome: .failed("sensor \"offline\""), system: "worker-b")
        let summary = ledger.summary
        #expect(summary.deadLetters.map(\.task.id) == [bad.id])
        let json = JobReporter(format: .json, total: 2).summary(summary)
        #expect(
            json.contains(
                #""dead_letter":[{"id":"00000000-0000-0000-0000-000000000002","sector":2,"attempts":1,"system":"worker-b","error":"sensor \"offline\""}]"#
            ),
            "\(json)"
        )
        let parsed = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        #expect(parsed?["summary"] != nil)
        let human = JobReporter(format: .human, total: 2).summary(summary)
        #expect(
            human.hasPrefix(
                "Dead letters: 1 task failed every attempt\n  2 (id 00000000-0000-0000-0000-000000000002): 1 attempt, last on worker-b: sensor \"offline\"\nSummary: 2 tasks"
            ),
            "\(human)"
        )
    }

}
