import ArgumentParser
import Foundation
import Glibc
import Logging
import SkyNet
import SkyNetCLI
import Synchronization
import ZeroMQ

/// The task kinds the `skynet` command runs: workers scan them, and coordinators re-run them locally.
/// Besides sectors, two no-ops for benchmarks and smoke tests: `noop` echoes its bytes (the raw,
/// wire-level form) and `noop-int` returns its Int (the typed form).
let cliScanners: [any SkyNet.TaskScanner] = [SectorScanner(), RawNoop(), IntNoop()]

/// `noop`: returns its input bytes, at once.
struct RawNoop: TaskScanner {
    static let kind = "noop"
    func scan(_ input: [UInt8]) async throws -> [UInt8] { input }
    func scanImmediately(_ input: [UInt8]) throws -> [UInt8]? { input }
}

/// `noop-int`: returns its input number, at once (through the typed API's coding).
struct IntNoop: TaskScanner {
    static let kind = "noop-int"
    func scan(_ input: Int) async throws -> Int { input }
    func scanImmediately(_ input: Int) throws -> Int? { input }
}
