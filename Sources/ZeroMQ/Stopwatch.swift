import CZMQ
import Glibc

/// Time elapsed on the monotonic clock, in nanoseconds: for the run time every RESULT carries.
/// `ContinuousClock`'s instants and `Duration`s are 128-bit attoseconds; reading two and turning the
/// difference into microseconds cost ~350 instructions of 128-bit arithmetic per scan in the worker
/// (callgrind, the deep-credit workload). This is two `clock_gettime` calls and a subtraction. Here,
/// beside the reactor's own monotonic clock: SkyNetCore reads no clock.
public struct Stopwatch: Sendable {
    private let start: UInt64

    /// Starts now.
    public init() { self.start = Self.now() }

    /// Nanoseconds since the start.
    public var elapsedNanoseconds: UInt64 { Self.now() &- self.start }

    /// The monotonic clock, in nanoseconds (the reactor's timers read it too).
    public static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
