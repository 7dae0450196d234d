/// How one attempt of a task ended.
public enum ScanOutcome: Sendable, Equatable {
    case completed([UInt8])
    /// The error's message, and the detail bytes of a ``ScannerError`` (empty for other errors).
    case failed(String, detail: [UInt8] = [])
    case timedOut
    case cancelled

    package var status: ResultStatus {
        switch self {
        case .completed: .completed
        case .failed: .failed
        case .timedOut: .timedOut
        case .cancelled: .cancelled
        }
    }

    /// The RESULT body: the output, or the error text (then a NUL byte and the detail, if any).
    package var body: [UInt8] {
        switch self {
        case .completed(let output): output
        case .failed(let reason, let detail): FailureText.encode(reason, detail: detail)
        case .timedOut: Array("timed out".utf8)
        case .cancelled: Array("cancelled".utf8)
        }
    }

    package init(status: ResultStatus, body: [UInt8]) {
        switch status {
        case .completed: self = .completed(body)
        case .failed:
            let (reason, detail) = FailureText.decode(body)
            self = .failed(reason, detail: detail)
        case .timedOut: self = .timedOut
        case .cancelled: self = .cancelled
        }
    }
}

/// A failed RESULT's body: the message (at most 4 KiB of UTF-8), then, when there is detail, a NUL
/// byte and the detail. The detail is carried as Latin-1 so the body stays valid UTF-8 whatever its
/// bytes; a body is at most ``ProtocolLimits/errorLength``, so detail is cut to fit.
package enum FailureText {
    package static let maxMessage = ProtocolLimits.textLength
    /// The most detail bytes a failure carries (each takes up to 2 bytes as Latin-1 in UTF-8).
    package static let maxDetail = (ProtocolLimits.errorLength - ProtocolLimits.textLength - 1) / 2

    package static func encode(_ message: String, detail: [UInt8]) -> [UInt8] {
        var bytes = Array(message.prefix(utf8Bytes: Self.maxMessage).utf8)
        bytes.removeAll { $0 == 0 }
        guard !detail.isEmpty else { return bytes }
        bytes.append(0)
        for byte in detail.prefix(Self.maxDetail) {
            if byte < 0x80 {
                bytes.append(byte)
            } else {
                bytes.append(0xC0 | byte >> 6)
                bytes.append(0x80 | byte & 0x3F)
            }
        }
        return bytes
    }

    package static func decode(_ body: [UInt8]) -> (message: String, detail: [UInt8]) {
        guard let nul = body.firstIndex(of: 0) else { return (String(decoding: body, as: UTF8.self), []) }
        let message = String(decoding: body[..<nul], as: UTF8.self)
        var detail: [UInt8] = []
        detail.reserveCapacity(body.count - nul)
        for scalar in String(decoding: body[(nul + 1)...], as: UTF8.self).unicodeScalars {
            detail.append(UInt8(truncatingIfNeeded: scalar.value))
        }
        return (message, detail)
    }
}

/// The outcome of one attempt of a ``ScanTask`` (the book's `TaskResponse`).
public struct ScanResult: Sendable, Equatable {
    /// The task.
    public var id: TaskID
    /// The attempt (1 = first try).
    public var attempt: UInt32
    /// How it ended.
    public var outcome: ScanOutcome
    /// The ScanSystem that ran it: a worker's name, or "local".
    public var system: String
    /// How long the scan ran.
    public var duration: Duration
    /// The slot it ran in, 0..<slots.
    public var slot: Int
    /// How many scans were running in that system when it started, itself included.
    public var busy: Int

    /// A result.
    public init(
        id: TaskID,
        attempt: UInt32,
        outcome: ScanOutcome,
        system: String,
        duration: Duration = .zero,
        slot: Int = 0,
        busy: Int = 0
    ) {
        self.id = id
        self.attempt = attempt
        self.outcome = outcome
        self.system = system
        self.duration = duration
        self.slot = slot
        self.busy = busy
    }

    package var meta: ResultMeta {
        ResultMeta(system: self.system, duration: self.duration, slot: self.slot, busy: self.busy)
    }
}

extension ResultMeta {
    /// What a RESULT says of the attempt that ran `duration` in `slot` of `system`, with `busy` scans
    /// running then.
    package init(system: String, duration: Duration, slot: Int, busy: Int) {
        self.init(system: system, nanoseconds: UInt64(clamping: duration.nanoseconds), slot: slot, busy: busy)
    }

    /// The same for a run of `nanoseconds` (a worker's stopwatch reading, without `Duration`'s
    /// 128-bit arithmetic).
    package init(system: String, nanoseconds: UInt64, slot: Int, busy: Int) {
        self.init(
            system: system,
            durationMicroseconds: UInt32(clamping: nanoseconds / 1000),
            slot: UInt16(clamping: slot),
            busy: UInt16(clamping: busy)
        )
    }
}
