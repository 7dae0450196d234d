// swift-tools-version:6.2
import PackageDescription

// SkyMap: SkyNet's example of real work. The sky is cut into sectors; workers render each sector's
// pixels (a fractal nebula and a star field), and the coordinator assembles them into a PNG.
let package = Package(
    name: "SkyMap",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "skynet", path: "../..")
    ],
    targets: [
        // The scanner and the PNG: what a worker and a coordinator share.
        .target(
            name: "SkyMapKit",
            dependencies: [.product(name: "SkyNet", package: "skynet")]
        ),
        .executableTarget(
            name: "skymap",
            dependencies: [
                "SkyMapKit",
                .product(name: "SkyNet", package: "skynet"),
                .product(name: "ZeroMQ", package: "skynet"),
            ]
        ),
    ]
)
