package import Logging

/// Logs at most `perSecond` messages a second and says how many it held back, so a flood of bad
/// frames cannot flood the log (or slow the reactor with it).
package struct RateLimitedLog {
    package let perSecond: Int
    private var windowStart = ContinuousClock.now
    private var inWindow = 0
    private var suppressed = 0

    package init(perSecond: Int = 5) { self.perSecond = perSecond }

    package mutating func log(
        _ logger: Logger,
        level: Logger.Level,
        _ message: @autoclosure () -> Logger.Message,
        metadata: @autoclosure () -> Logger.Metadata? = nil
    ) {
        let now = ContinuousClock.now
        if now - self.windowStart >= .seconds(1) {
            if self.suppressed > 0 {
                logger.log(level: level, "\(self.suppressed) similar messages suppressed")
            }
            self.windowStart = now
            self.inWindow = 0
            self.suppressed = 0
        }
        guard self.inWindow < self.perSecond else {
            self.suppressed += 1
            return
        }
        self.inWindow += 1
        logger.log(level: level, message(), metadata: metadata())
    }
}
