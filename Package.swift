// swift-tools-version:6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "skynet",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "skynet", targets: ["skynet"]),
        .library(name: "SkyNet", targets: ["SkyNet"]),
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        // The exec kind's child processes: sessions, process-group teardown, streamed output.
        .package(url: "https://github.com/swiftlang/swift-subprocess.git", from: "1.0.2"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.1"),
        // The broker's HTTP endpoint (`--http`): dashboard, /api/status and /metrics.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // libzmq itself (Debian's libzmq3-dev), not the high-level C library also called CZMQ.
        .systemLibrary(name: "CZMQ", path: "CZMQ", providers: [.apt(["libzmq3-dev"])]),
        // The system's OpenSSL (Debian's libssl-dev), for TLS to etcd in HA mode.
        .systemLibrary(name: "COpenSSL", path: "COpenSSL", providers: [.apt(["libssl-dev"])]),
        .target(
            name: "ZeroMQ",
            dependencies: ["CZMQ"],
            swiftSettings: swiftSettings
        ),
        // The wire codec and the pure machines (broker, commit pipeline, detached jobs, retry ledger,
        // liveness): no socket, no file, no clock, no ZeroMQ. What the fuzzer and the unit tests drive.
        .target(
            name: "SkyNetCore",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: swiftSettings
        ),
        // The actors and their I/O on the core: the broker, worker and coordinator, their sockets, the
        // journal's file and thread, CURVE, child processes. It re-exports SkyNetCore.
        .target(
            name: "SkyNet",
            dependencies: [
                "SkyNetCore",
                "ZeroMQ",
                "COpenSSL",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the command line needs beyond the library: task files, output, the job runner.
        .target(
            name: "SkyNetCLI",
            dependencies: ["SkyNet", "ZeroMQ", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // The broker's HTTP endpoint, on Hummingbird's own threads (the library does not link NIO).
        .target(
            name: "SkyNetHTTP",
            dependencies: [
                "SkyNet",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "skynet",
            dependencies: [
                "SkyNet",
                "SkyNetCLI",
                "SkyNetHTTP",
                "ZeroMQ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The fuzz harness: scripts of frames from fake peers into the broker machine (core only).
        .target(
            name: "SkyNetFuzzing",
            dependencies: ["SkyNetCore", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // The libFuzzer target (`make fuzz`); built plainly it replays a corpus (the tests do).
        .executableTarget(
            name: "skynet-fuzz",
            dependencies: ["SkyNetFuzzing"],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"], swiftSettings: swiftSettings),
        .testTarget(
            name: "SkyNetTests",
            dependencies: [
                "SkyNet", "SkyNetCore", "SkyNetFuzzing", "ZeroMQ", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SkyNetCLITests",
            dependencies: ["SkyNet", "SkyNetCLI"],
            swiftSettings: swiftSettings
        ),
        // The README's Swift example, built with the public API only.
        .testTarget(
            name: "ExampleTests",
            dependencies: ["SkyNet", "ZeroMQ", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["SkyNet", "SkyNetCLI", "ZeroMQ", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
    ]
)
