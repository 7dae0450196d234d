import Foundation
import Testing

@testable import SkyNet
@testable import SkyNetCore
@testable import SkyNetCLI

@Suite("Command templates, exec task lines, job logs and ordering")
struct ExecCLITests {
    @Test("a template splits as a shell splits words; replacement strings are substituted per word")
    func templates() throws {
        let template = try CommandTemplate(#"gzip -9 -k {} 'a b' "c \"d\" \$e" f\ g"#)
        #expect(template.words == ["gzip", "-9", "-k", "{}", "a b", #"c "d" $e"#, "f g"])
        #expect(
            template.arguments(line: "x y.txt", sequence: 3) == [
                "gzip", "-9", "-k", "x y.txt", "a b", #"c "d" $e"#, "f g",
            ]
        )
        let names = try CommandTemplate("cp {} {.}.bak {/} {//} {/.} n{#}")
        #expect(
            names.arguments(line: "/srv/logs/app.log", sequence: 12)
                == ["cp", "/srv/logs/app.log", "/srv/logs/app.bak", "app.log", "/srv/logs", "app", "n12"]
        )
        #expect(names.arguments(line: "plain", sequence: 1)[2...4] == ["plain.bak", "plain", "."])
        // A dot that starts the name, or one a slash follows, is not an extension; names are bytes.
        #expect(names.arguments(line: "/.hidden", sequence: 1)[3...5] == [".hidden", "/", ".hidden"])
        #expect(names.arguments(line: "d.d/f", sequence: 1)[2...5] == ["d.d/f.bak", "f", "d.d", "f"])
        #expect(names.arguments(line: "é/ñ.tx", sequence: 1)[2...5] == ["é/ñ.bak", "ñ.tx", "é", "ñ"])
        #expect(names.arguments(line: "dir/", sequence: 1)[3...5] == ["", "dir", ""])
        // Braces that are not a replacement string stay as they are.
        #expect(
            try CommandTemplate("echo {x} {{}} { {#}{}").arguments(line: "L", sequence: 7)
                == ["echo", "{x}", "{L}", "{", "7L"]
        )
        // No replacement string: the line is the last argument, as in GNU parallel.
        #expect(try CommandTemplate("wc -l").arguments(line: "f", sequence: 1) == ["wc", "-l", "f"])
        // Nothing is expanded: no $VAR, no glob, no ~.
        #expect(try CommandTemplate("echo $HOME * ~").words == ["echo", "$HOME", "*", "~"])
        for bad in ["'open", "\"open", "trailing\\", "", "   ", "''"] {
            #expect(throws: CommandTemplate.ParseError.self, "\(bad)") { try CommandTemplate(bad) }
        }
    }

    @Test("one exec task per line, blank ones too (as GNU parallel), numbered from 1, with the environment and workdir")
    func templateTasks() throws {
        let tasks = try CommandTemplate("sha256sum {}").tasks(
            lines: "a\n\nb c\r\n",
            environment: ["K": "V"],
            workingDirectory: "/srv",
            maxOutput: 1024
        )
        let requests = try tasks.map { try ExecRequest(scanBytes: $0.input) }
        #expect(tasks.allSatisfy { $0.kind == "exec" })
        #expect(requests.map(\.arguments) == [["sha256sum", "a"], ["sha256sum", ""], ["sha256sum", "b c"]])
        #expect(requests.map(\.sequence) == [1, 2, 3] && requests.allSatisfy { $0.environment == ["K": "V"] })
        #expect(requests.allSatisfy { $0.workingDirectory == "/srv" && $0.maxOutput == 1024 })
        #expect(
            CommandTemplate.lines("x") == ["x"] && CommandTemplate.lines("\n") == [""]
                && CommandTemplate.lines("").isEmpty
        )
        // A NUL cannot be an argument: an error naming the line, not an argument cut short.
        #expect(throws: TaskFile.ParseError.self) {
            try CommandTemplate("echo {}").tasks(
                lines: "ok\na\u{0}b\n",
                environment: [:],
                workingDirectory: nil,
                maxOutput: 1
            )
        }
        #expect(throws: TaskFile.ParseError.self) {
            try TaskFile.parse(#"{"exec": ["echo", "abc\u0000def"]}"#, defaultWork: .zero, defaultFailEvery: 0)
        }
    }

    @Test("the environment rule refuses loader and interpreter hooks and PATH, unless the worker allows them by name")
    func environmentRule() {
        for name in [
            "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH", "BASH_ENV", "ENV", "PATH", "PYTHONPATH",
            "BASH_FUNC_x%%", "PERL5OPT", "NODE_OPTIONS", "SKYNET_SEQ",
        ] {
            #expect(ExecEnvironment.refusal(of: name) != nil, "\(name)")
        }
        for name in ["LEVEL", "LANG", "TZ", "HOME", "MY_SETTING_2", "_x"] {
            #expect(ExecEnvironment.refusal(of: name) == nil, "\(name)")
        }
        for bad in ["", "1X", "A=B", "A B", "A\u{0}", "É"] {
            #expect(ExecEnvironment.refusal(of: bad) != nil, "\(bad)")
        }
        #expect(ExecEnvironment.refusal(of: "LD_LIBRARY_PATH", allowed: ["LD_LIBRARY_PATH"]) == nil)
        #expect(ExecEnvironment.refusal(of: "PATH")?.contains("absolute path") == true)
    }

    @Test("task files take exec lines with env and workdir, and refuse what does not fit")
    func taskFileExec() throws {
        let tasks = try TaskFile.parse(
            #"""
            {"exec": ["gzip", "-9", "big log"], "timeout": "10s", "env": {"LEVEL": "9"}}
            {"sector": 3}
            {"exec": ["ls"], "workdir": "/tmp"}
            """#,
            defaultWork: .zero,
            defaultFailEvery: 0,
            exec: TaskFile.ExecDefaults(environment: ["FROM": "flag", "LEVEL": "1"], maxOutput: 4096)
        )
        let first = try ExecRequest(scanBytes: tasks[0].input)
        #expect(first.arguments == ["gzip", "-9", "big log"] && first.environment == ["FROM": "flag", "LEVEL": "9"])
        #expect(tasks[0].timeout == .seconds(10) && first.sequence == 1 && first.maxOutput == 4096)
        #expect(tasks[1].sector == 3)
        #expect(try ExecRequest(scanBytes: tasks[2].input).workingDirectory == "/tmp")
        let bad: [(String, String)] = [
            (#"{"exec": []}"#, "needs \"exec\""),
            (#"{"exec": "gzip x"}"#, "needs \"exec\""),
            (#"{"exec": ["gzip", 3]}"#, "array of strings"),
            (#"{"exec": ["gzip"], "env": {"K": 1}}"#, "must be a string"),
            (#"{"exec": ["gzip"], "sector": 1}"#, "not for exec"),
            (#"{"sector": 1, "env": {}}"#, "are for exec tasks"),
        ]
        for (line, message) in bad {
            do {
                _ = try TaskFile.parse(line, defaultWork: .zero, defaultFailEvery: 0)
                Issue.record("accepted \(line)")
            } catch {
                #expect(error.description.contains(message), "\(line): \(error)")
            }
        }
    }

    @Test("in order: a result waits for the ones before it; flush gives what is left")
    func inOrder() {
        var order = InOrder<String>()
        #expect(order.add(1, "b").isEmpty)
        #expect(order.add(0, "a") == ["a", "b"])
        #expect(order.add(3, "d").isEmpty)
        #expect(order.flush() == ["d"])
    }

    @Test("a job log row has GNU parallel's nine columns, from the command's own status and output")
    func joblogRow() throws {
        let request = ExecRequest(["gzip", "a b"], sequence: 4)
        let output = ExecOutput(
            exitCode: 0,
            stdout: [1, 2],
            stderr: [3],
            started: 1_700_000_000.25,
            runtime: .milliseconds(1500)
        )
        let task = ScanTask(kind: "exec", input: request.scanBytes)
        let row = JobLog.row(
            FinalResult(task: task, status: .completed, attempts: 1, system: "w1", output: output.scanBytes),
            index: 0
        )
        #expect(row == "4\tw1\t1700000000.250\t     1.500\t0\t3\t0\t0\tgzip 'a b'\n")
        let killed = ExecOutput(exitCode: -1, signal: 9)
        let failed = FinalResult(
            task: task,
            status: .failed,
            attempts: 2,
            system: "w2",
            error: "x",
            errorDetail: killed.scanBytes
        )
        #expect(JobLog.row(failed, index: 0).split(separator: "\t").map(String.init)[6...7] == ["-1", "9"])
        let timedOut = FinalResult(task: task, status: .failed, attempts: 1, system: "w2", error: "timed out")
        #expect(JobLog.row(timedOut, index: 0).split(separator: "\t").map(String.init)[6...7] == ["-1", "0"])
    }

    @Test("a failure's detail survives the wire: binary bytes, NULs and a long message cut at a character")
    func failureText() {
        let detail: [UInt8] = [0, 1, 0xFF, 0x80, 10] + Array(repeating: 0xC3, count: 40_000)
        let body = FailureText.encode(String(repeating: "é", count: 3000), detail: detail)
        #expect(body.count <= ProtocolLimits.errorLength && String(validating: body, as: UTF8.self) != nil)
        let (message, decoded) = FailureText.decode(body)
        #expect(message.utf8.count <= ProtocolLimits.textLength && message.allSatisfy { $0 == "é" })
        #expect(decoded == Array(detail.prefix(FailureText.maxDetail)))
        #expect(FailureText.decode(FailureText.encode("plain", detail: [])) == ("plain", []))
    }
}
