import ArgumentParser
import Foundation
import SkyNet
import SkyNetCLI

// Where a job's tasks come from: --sectors, --tasks FILE.jsonl, or --exec with --inputs.
extension SubmitCommand {
    /// The tasks of `--exec` with `--inputs` that is not a regular file (a pipe, a FIFO, `<(cmd)`, a
    /// terminal), in chunks as its lines arrive; nil when the input is read whole first (a regular
    /// file, or with `--cache`, `--detach` or `--retry local`, which need the whole job).
    func streamedInputs() throws -> AsyncThrowingStream<[ScanTask], any Error>? {
        guard let exec = self.exec, let inputs = self.inputs, self.cache == nil, !self.detach,
            self.retry != .local
        else { return nil }
        let fd = inputs == "-" ? STDIN_FILENO : open(inputs, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CLIError("cannot read --inputs \(inputs): \(String(cString: strerror(errno)))") }
        guard !POSIX.isRegularFile(fd) else {
            if fd != STDIN_FILENO { close(fd) }
            return nil
        }
        let template = try CommandTemplate(exec)
        let environment = Dictionary(
            uniqueKeysWithValues: self.environment.map { ($0, ProcessInfo.processInfo.environment[$0] ?? "") }
        )
        let (workdir, maxOutput, timeout) = (self.workdir, self.maxOutput.bytes, self.timeout?.duration)
        let lines = LineReader.chunks(of: fd)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [ScanTask].self)
        let feeder = Task {
            var next = 1
            do {
                for try await chunk in lines {
                    var tasks = try template.tasks(
                        lines: chunk,
                        firstSequence: next,
                        environment: environment,
                        workingDirectory: workdir,
                        maxOutput: maxOutput
                    )
                    if let timeout { for index in tasks.indices { tasks[index].timeout = timeout } }
                    next += chunk.count
                    continuation.yield(tasks)
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in feeder.cancel() }
        return stream
    }

    /// All of `path` (`-`: standard input) as UTF-8 text: a file, a pipe, a FIFO, `<(cmd)` or
    /// `/dev/null` alike.
    static func readText(_ path: String, what: String) throws -> String {
        let fd = path == "-" ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CLIError("cannot read \(what) \(path): \(String(cString: strerror(errno)))") }
        defer { if fd != STDIN_FILENO { close(fd) } }
        let bytes: [UInt8]
        switch POSIX.readAll(fd) {
        case .success(let read): bytes = read
        case .failure(let error):
            throw CLIError("cannot read \(what) \(path): \(String(cString: strerror(error.code)))")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            let bad = (lines.firstIndex { String(validating: $0, as: UTF8.self) == nil } ?? 0) + 1
            throw CLIError("\(what) \(path == "-" ? "(standard input)" : path): line \(bad) is not UTF-8 text")
        }
        return text
    }

    func loadTasks() throws -> [ScanTask] {
        var tasks = try self.readTasks()
        if let timeout = self.timeout?.duration {
            for index in tasks.indices where tasks[index].timeout == nil { tasks[index].timeout = timeout }
        }
        return tasks
    }

    private func readTasks() throws -> [ScanTask] {
        let environment = Dictionary(
            uniqueKeysWithValues: self.environment.map { ($0, ProcessInfo.processInfo.environment[$0] ?? "") }
        )
        if let exec = self.exec, let inputs = self.inputs {
            let template = try CommandTemplate(exec)
            let text = try Self.readText(inputs, what: "--inputs")
            let tasks: [ScanTask]
            do {
                tasks = try template.tasks(
                    lines: text,
                    environment: environment,
                    workingDirectory: self.workdir,
                    maxOutput: self.maxOutput.bytes
                )
            } catch {
                throw CLIError("--inputs \(inputs == "-" ? "(standard input)" : inputs): \(error)")
            }
            guard !tasks.isEmpty else {
                throw CLIError("--inputs \(inputs == "-" ? "(standard input)" : inputs) holds no lines")
            }
            return tasks
        }
        if let sectors = self.sectors {
            // The options read once: each read of a parsed option looks its type up at run time
            // (about 1,000 instructions a task for three of them, with 200,000 tasks).
            let (work, failEvery, cpuBound) = (self.work.duration, self.failEvery, self.cpuBound)
            // Numbered ids: the coordinator finds each task by its number (``TaskID/Run``).
            let ids = TaskID.Run()
            return (1...sectors).map {
                ScanTask.sector($0, work: work, failEvery: failEvery, cpuBound: cpuBound, id: ids.id($0 - 1))
            }
        }
        let path = self.tasks!
        let text = try Self.readText(path, what: "task file")
        do {
            let tasks = try TaskFile.parse(
                text,
                defaultWork: self.work.duration,
                defaultFailEvery: self.failEvery,
                exec: TaskFile.ExecDefaults(
                    environment: environment,
                    workingDirectory: self.workdir,
                    maxOutput: self.maxOutput.bytes
                )
            )
            guard !tasks.isEmpty else { throw CLIError("\(path) holds no tasks") }
            return tasks
        } catch let error as TaskFile.ParseError {
            throw CLIError("\(path): \(error)")
        }
    }
}
