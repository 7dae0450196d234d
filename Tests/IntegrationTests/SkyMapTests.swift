import Foundation
import SkyNet
import SkyNetCLI
import Testing

/// The SkyMap example (its own package, `Examples/SkyMap`) with real processes: a broker, skymap
/// workers, one of them SIGKILLed mid-run, and the picture compared byte for byte with the one
/// rendered in a single process. An extension of ``EndToEndTests``: serialized with the others.
extension EndToEndTests {
    static var skymapPath: String {
        if let path = ProcessInfo.processInfo.environment["SKYMAP_BIN"], !path.isEmpty { return path }
        return SkynetBinary.packageRoot.appendingPathComponent("Examples/SkyMap/.build/debug/skymap").path
    }

    static func skymap(_ arguments: [String], name: String, environment: [String] = []) throws -> ChildProcess {
        guard FileManager.default.isExecutableFile(atPath: Self.skymapPath) else {
            throw TestFailure("no skymap at \(Self.skymapPath): `make test` builds Examples/SkyMap first")
        }
        return try ChildProcess(
            executable: Self.skymapPath,
            arguments,
            name: name,
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("skynet-tests-\(getpid())"),
            launcher: environment.isEmpty ? [] : ["/usr/bin/env"] + environment
        )
    }

    @Test("SkyMap: the picture from 3 workers, one SIGKILLed mid-run, is byte-identical to the single-process one")
    func skyMapIdentical() async throws {
        let directory = try Self.directory()
        let size = ["--width", "640", "--height", "480", "--sectors", "40"]
        let single = directory.appendingPathComponent("single.png").path
        let distributed = directory.appendingPathComponent("distributed.png").path
        let local = try Self.skymap(["render", "--local", "--out", single] + size, name: "skymap-local")
        #expect(await local.waitForExit(timeout: .seconds(60)) == 0, "\(local.stderr)")

        let cluster = try await Cluster(workers: 0)
        var workers: [ChildProcess] = []
        for name in ["sky-a", "sky-b", "sky-c"] {
            let before = try await cluster.registrations()
            workers.append(
                try Self.skymap(
                    ["worker"],
                    name: name,
                    environment: ["SKYNET_BROKER=\(cluster.backend)", "SKYNET_SLOTS=1", "SKYNET_WORKER_NAME=\(name)"]
                )
            )
            #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.workersRegistered > before })
        }
        let render = try Self.skymap(
            ["render", "--broker", cluster.frontend, "--out", distributed] + size,
            name: "render"
        )
        // Kill one worker while a sector runs on it, once a few are done.
        #expect(try await cluster.waitForStatus(timeout: .seconds(10)) { $0.resultsForwarded >= 6 })
        workers[1].signal(SIGKILL)
        #expect(await render.waitForExit(timeout: .seconds(120)) == 0, "\(render.stderr)")
        let status = try await cluster.status()
        #expect(status.workersLost == 1 && status.requeued >= 1, "the killed worker's sector ran elsewhere: \(status)")
        for worker in workers { _ = await worker.stop() }
        await cluster.shutdown()
        let a = try Data(contentsOf: URL(fileURLWithPath: single))
        let b = try Data(contentsOf: URL(fileURLWithPath: distributed))
        #expect(a.count > 640 * 480 * 3, "stored (uncompressed) PNG: \(a.count) bytes")
        #expect(a == b, "the distributed picture differs from the single-process one")
        #expect(render.stdout.contains("sky-a") && render.stdout.contains("sky-c"), "\(render.stdout)")
        #expect(a.prefix(8) == Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
    }
}
