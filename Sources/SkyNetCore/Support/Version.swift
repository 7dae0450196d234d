/// SkyNet's version, sent in READY and printed by `skynet --version`.
public enum SkyNetVersion {
    /// This build's version.
    public static let current = "0.1.0"
}
