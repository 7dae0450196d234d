import ArgumentParser
import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import Synchronization
import ZeroMQ

struct LoggingOptions: ParsableArguments {
    @Option(help: "Log level (logs go to standard error).")
    var logLevel: LogLevelArgument?

    @Option(help: "Logs as text, or as one JSON object a line (for log collectors).")
    var logFormat: LogFormatArgument = .text

    /// Sets up logging to standard error once, and returns a logger.
    func logger(_ label: String, default level: Logger.Level) -> Logger {
        let chosen = self.logLevel?.level ?? level
        LoggingSetup.bootstrap(level: chosen, json: self.logFormat == .json)
        var logger = Logger(label: label)
        logger.logLevel = chosen
        return logger
    }
}

enum LoggingSetup {
    static func bootstrap(level: Logger.Level, json: Bool = false) {
        LoggingSystem.bootstrap { label in
            if json { return JSONLogHandler(label: label, logLevel: level) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

/// `--log-format json`: one object a line on standard error, with `time`, `level`, `label`,
/// `message`, `source`, and the same metadata fields as the text format (as strings).
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    init(label: String, logLevel: Logger.Level) {
        self.label = label
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = self.metadata.merging(event.metadata ?? [:]) { _, new in new }
        fields["time"] = nil
        var line = "{\"time\":" + JobReporter.quote(Self.timestamp()) + ",\"level\":\"\(event.level)\""
        line += ",\"label\":" + JobReporter.quote(self.label) + ",\"message\":" + JobReporter.quote("\(event.message)")
        line += ",\"source\":" + JobReporter.quote(event.source)
        for (key, value) in fields.sorted(by: { $0.key < $1.key })
        where !["level", "label", "message", "source"].contains(key) {
            line += "," + JobReporter.quote(key) + ":" + JobReporter.quote("\(value)")
        }
        Terminal.writeAll(STDERR_FILENO, line + "}\n")
    }

    /// Now in RFC 3339 with milliseconds, UTC.
    static func timestamp() -> String {
        // From Date, not clock_gettime: a release build resolves `timespec` through CDispatch, which
        // member import visibility then refuses.
        let now = Date().timeIntervalSince1970
        let whole = now.rounded(.down)
        var parts = tm()
        var seconds = time_t(whole)
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
            parts.tm_year + 1900,
            parts.tm_mon + 1,
            parts.tm_mday,
            parts.tm_hour,
            parts.tm_min,
            parts.tm_sec,
            Int32((now - whole) * 1000)
        )
    }
}
