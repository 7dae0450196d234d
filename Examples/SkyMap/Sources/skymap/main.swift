import Foundation
import Logging
import SkyMapKit
import SkyNet
import ZeroMQ

// skymap worker                       serve sectors (SKYNET_BROKER, SKYNET_SLOTS, CURVE from the environment)
// skymap render --broker URL --out F  render the sky on the workers, assemble the PNG
// skymap render --local --out F       render it in this process alone, for comparison

let usage = """
    usage: skymap worker
           skymap render (--broker tcp://HOST:5555 | --local) [--out sky.png] [--width 1280] [--height 960] [--sectors 64]
    """

func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("skymap: \(message)\n".utf8))
    exit(2)
}

func run(_ arguments: [String]) async throws {
    switch arguments.first {
    case "worker":
        // The whole worker: SkyNet builds the reactor, serves until SIGTERM and drains.
        try await Worker.serve(scanners: [RenderSector()])

    case "render":
        func number(_ name: String, _ fallback: Int) -> Int {
            guard let text = option(name, in: arguments) else { return fallback }
            guard let value = Int(text), value > 0 else { fail("\(name) must be a positive number, not \(text)") }
            return value
        }
        let (width, height, count) = (number("--width", 1280), number("--height", 960), number("--sectors", 64))
        guard count <= height else { fail("--sectors must be at most --height") }
        let out = option("--out", in: arguments) ?? "sky.png"
        let sectors = Sector.sky(width: width, height: height, sectors: count)
        var pixels = [UInt8](repeating: 0, count: width * height * 3)
        let clock = ContinuousClock()
        let start = clock.now
        var bySystem: [String: Int] = [:]
        if arguments.contains("--local") {
            for sector in sectors {
                let band = try await RenderSector().scan(sector)
                pixels.replaceSubrange(
                    (sector.firstRow * width * 3)..<((sector.firstRow + sector.rows) * width * 3),
                    with: band
                )
            }
            bySystem["local"] = sectors.count
        } else {
            guard let broker = option("--broker", in: arguments) else {
                fail("give --broker tcp://HOST:5555 or --local\n\(usage)")
            }
            var logger = Logger(label: "skymap")
            logger.logLevel = .warning
            let results = try await withReactor { reactor in
                try await Coordinator.withCoordinator(
                    configuration: CoordinatorConfiguration(broker: broker, retry: .remote(maxAttempts: 3)),
                    reactor: reactor,
                    logger: logger,
                    scanners: [RenderSector()]
                ) { coordinator in
                    var bands: [(Sector, [UInt8], String)] = []
                    let terminal = isatty(STDERR_FILENO) != 0
                    for try await result in try await coordinator.submit(RenderSector(), sectors) {
                        bands.append((result.input, try result.get(), result.final.system))
                        if terminal {
                            FileHandle.standardError.write(Data("\rsectors \(bands.count)/\(sectors.count)".utf8))
                        }
                    }
                    if terminal { FileHandle.standardError.write(Data("\n".utf8)) }
                    return bands
                }
            }
            for (sector, band, system) in results {
                pixels.replaceSubrange(
                    (sector.firstRow * width * 3)..<((sector.firstRow + sector.rows) * width * 3),
                    with: band
                )
                bySystem[system, default: 0] += 1
            }
        }
        let png = PNG.encode(width: width, height: height, rgb: pixels)
        guard FileManager.default.createFile(atPath: out, contents: Data(png)) else { fail("cannot write \(out)") }
        let seconds = (clock.now - start) / .seconds(1)
        let systems = bySystem.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        print(
            "\(out): \(width)×\(height), \(sectors.count) sectors in \(String(format: "%.2f", seconds)) s (\(systems))"
        )

    default:
        fail(usage)
    }
}

do {
    try await run(Array(CommandLine.arguments.dropFirst()))
} catch {
    fail("\(error)")
}
