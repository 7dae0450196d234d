import Foundation
import SkyNet

/// One sector of the sky: a band of rows of the whole picture.
public struct Sector: Codable, Sendable, Equatable {
    /// The sector's number, from 0 at the top.
    public var index: Int
    /// The whole picture's size, in pixels.
    public var width: Int
    public var height: Int
    /// The rows this sector covers: `firstRow..<firstRow + rows`.
    public var firstRow: Int
    public var rows: Int

    public init(index: Int, width: Int, height: Int, firstRow: Int, rows: Int) {
        self.index = index
        self.width = width
        self.height = height
        self.firstRow = firstRow
        self.rows = rows
    }

    /// A `width` × `height` sky cut into `count` bands of rows.
    public static func sky(width: Int, height: Int, sectors count: Int) -> [Sector] {
        (0..<count).map { index in
            let first = index * height / count
            let next = (index + 1) * height / count
            return Sector(index: index, width: width, height: height, firstRow: first, rows: next - first)
        }
    }
}

/// Renders a sector's pixels: a Mandelbrot nebula with smooth colouring and a star field. The
/// input is a ``Sector`` (it travels as JSON); the output is its RGB bytes, row by row (raw bytes,
/// no encoding). Deterministic: the same sector gives the same bytes on every host of the same
/// architecture, so a picture assembled from any workers equals the one rendered in one process.
public struct RenderSector: TaskScanner {
    public static let kind = "skymap-sector"
    /// Iterations per pixel at most: the CPU cost (tens of milliseconds a sector at the default).
    public let maxIterations: Int

    public init(maxIterations: Int = 1000) { self.maxIterations = maxIterations }

    public func scan(_ sector: Sector) async throws -> [UInt8] {
        guard sector.width > 0, sector.height > 0, sector.rows >= 0, sector.width * sector.rows <= 1 << 22 else {
            throw ScannerError("sector \(sector.index): bad size \(sector.width)×\(sector.rows)")
        }
        var pixels = [UInt8](repeating: 0, count: sector.width * sector.rows * 3)
        for row in 0..<sector.rows {
            if row % 8 == 0 { try Task.checkCancellation() }
            let y = sector.firstRow + row
            for x in 0..<sector.width {
                let (r, g, b) = self.pixel(x: x, y: y, width: sector.width, height: sector.height)
                let offset = (row * sector.width + x) * 3
                pixels[offset] = r
                pixels[offset + 1] = g
                pixels[offset + 2] = b
            }
        }
        return pixels
    }

    func pixel(x: Int, y: Int, width: Int, height: Int) -> (UInt8, UInt8, UInt8) {
        // The view: the seahorse valley, scaled to keep the aspect ratio.
        let scale = 0.9 / Double(height)
        let cx = -0.7435 + (Double(x) - Double(width) / 2) * scale * 0.3
        let cy = 0.1314 + (Double(y) - Double(height) / 2) * scale * 0.3
        var zx = 0.0
        var zy = 0.0
        var iteration = 0
        while iteration < self.maxIterations && zx * zx + zy * zy <= 256 {
            (zx, zy) = (zx * zx - zy * zy + cx, 2 * zx * zy + cy)
            iteration += 1
        }
        var (r, g, b) = (0.0, 0.0, 0.0)
        if iteration < self.maxIterations {
            // Smooth colouring: a fractional iteration count, mapped to a nebula palette.
            let smooth = Double(iteration) + 1 - (log2(log2(zx * zx + zy * zy)) - 2)
            let t = smooth / Double(self.maxIterations)
            let glow = min(1, sqrt(t) * 1.6)
            r = glow * (0.35 + 0.65 * sin(smooth * 0.07 + 0.3).magnitude)
            g = glow * (0.12 + 0.45 * sin(smooth * 0.05 + 1.9).magnitude)
            b = glow * (0.55 + 0.45 * sin(smooth * 0.03 + 0.8).magnitude)
        }
        // Stars: a hash of the pixel decides, and how bright.
        var hash = UInt64(x) &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(y) &* 0xC2B2_AE3D_27D4_EB4F
        hash ^= hash >> 29
        hash = hash &* 0xBF58_476D_1CE4_E5B9
        hash ^= hash >> 32
        if hash % 1200 == 0 {
            let star = 0.6 + Double(hash >> 40 & 0xFF) / 640
            (r, g, b) = (max(r, star), max(g, star), max(b, star * 1.05))
        }
        func byte(_ value: Double) -> UInt8 { UInt8(max(0, min(255, (value * 255).rounded()))) }
        return (byte(r), byte(g), byte(b))
    }
}
