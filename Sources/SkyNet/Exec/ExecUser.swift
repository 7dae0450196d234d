import SkyNetCore
public import Glibc

/// The account a worker runs commands as (`skynet worker --run-as USER`): its user, group and
/// supplementary groups, looked up once when the worker starts.
///
/// A command runs with the rights of its user. As root, an allowed program that reads files
/// (`gzip -c`, `cat`, `tar`) can read the worker's CURVE secret and journal; as an unprivileged
/// user it can read and write only what that user can.
public struct ExecUser: Sendable, Equatable {
    /// The account's name.
    public let name: String
    public let uid: uid_t
    public let gid: gid_t
    /// Its supplementary groups (from the group database).
    public let groups: [gid_t]

    /// An account by name, or by number (`65534`).
    /// - Throws: ``ScannerError`` when there is no such account.
    public init(named name: String) throws(ScannerError) {
        let entry = getpwnam(name) ?? uid_t(name).flatMap { getpwuid($0) }
        guard let entry else {
            throw ScannerError("--run-as \(name): no such user on this host (see /etc/passwd; e.g. --run-as nobody)")
        }
        self.name = String(cString: entry.pointee.pw_name)
        self.uid = entry.pointee.pw_uid
        self.gid = entry.pointee.pw_gid
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(entry.pointee.pw_name, self.gid, &groups, &count) < 0 {
            groups = [gid_t](repeating: 0, count: Int(count))
            _ = getgrouplist(entry.pointee.pw_name, self.gid, &groups, &count)
        }
        self.groups = Array(groups.prefix(Int(max(count, 0))))
    }

    /// Whether this is the superuser.
    public var isRoot: Bool { self.uid == 0 }

    /// Whether this process runs as root (and so must be told whom to run commands as).
    public static var processIsRoot: Bool { geteuid() == 0 }

    /// Whether this process can switch to this user (it is root, or already this user).
    public var isReachable: Bool { Self.processIsRoot || (geteuid() == self.uid && getegid() == self.gid) }
}

/// Which variables a command may be given (``ExecRequest/environment``).
///
/// A worker allows only listed programs, so what a submitter must not do is make an allowed program
/// run other code. The environment is the classic way: the dynamic loader (`LD_PRELOAD`,
/// `LD_LIBRARY_PATH`, `LD_AUDIT`), glibc (`GCONV_PATH`, `LOCPATH`, `HOSTALIASES`), shells (`BASH_ENV`,
/// `ENV`, `BASH_FUNC_*`, `SHELLOPTS`, `PS4`, `IFS`) and interpreters (`PYTHONPATH`, `PERL5OPT`,
/// `RUBYOPT`, `NODE_OPTIONS`, `JAVA_TOOL_OPTIONS`, …) each load code named by a variable. These are
/// refused as sudo's `env_reset` and `env_delete` refuse them, and so is `PATH` (the worker sets it:
/// a program found through a submitter's `PATH` would not be the one allowed). A worker's
/// `--allow-env NAME` allows a refused name when its programs need it. Names must look like shell
/// names (letters, digits, `_`, not starting with a digit).
public enum ExecEnvironment {
    /// Refused names.
    public static let refusedNames: Set<String> = [
        "PATH", "IFS", "CDPATH", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "GLOBIGNORE", "FPATH",
        "ZDOTDIR", "NULLCMD", "READNULLCMD", "TMPPREFIX", "GCONV_PATH", "LOCPATH", "NLSPATH", "PATH_LOCALE",
        "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "RESOLV_HOST_CONF",
        "GLIBC_TUNABLES", "TERMINFO", "TERMINFO_DIRS", "TERMPATH", "TERMCAP", "PYTHONPATH",
        "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PERLLIB",
        "PERL5LIB", "PERL5OPT", "PERL5DB", "PERLIO_DEBUG", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS", "NODE_PATH",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "LUA_PATH", "LUA_CPATH",
        "TCLLIBPATH", "GIT_EXEC_PATH", "GIT_CONFIG", "GIT_SSH", "GIT_SSH_COMMAND", "SSH_ASKPASS", "EDITOR",
        "VISUAL", "PAGER", "OPENSSL_CONF", "OPENSSL_ENGINES", "SSLKEYLOGFILE",
    ]
    /// Refused prefixes: the loader's (`LD_`), bash's exported functions, glibc's allocator hooks,
    /// SkyNet's own, and the Swift runtime's (each command's guard is a Swift program that starts
    /// as the worker's user before it drops to ``ExecUser``).
    public static let refusedPrefixes = ["LD_", "BASH_FUNC_", "_RLD", "DYLD_", "MALLOC_", "SKYNET_", "SWIFT_"]

    /// Why `name` may not be given to a command on a worker that allows `allowed`; nil when it may.
    public static func refusal(of name: String, allowed: Set<String> = []) -> String? {
        guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first),
            name.utf8.allSatisfy({ $0 == UInt8(ascii: "_") || ($0 < 0x80 && isalnum(Int32($0)) != 0) })
        else {
            return "\(Self.shown(name)) is not a variable name (letters, digits and _, not starting with a digit)"
        }
        if allowed.contains(name) { return nil }
        if Self.refusedNames.contains(name) || Self.refusedPrefixes.contains(where: { name.hasPrefix($0) }) {
            return name == "PATH"
                ? "PATH is set by the worker (/usr/local/bin:/usr/bin:/bin); name programs by absolute path"
                : "\(name) can make an allowed program run other code, so it is refused (a worker's --allow-env \(name) allows it)"
        }
        return nil
    }

    private static func shown(_ name: String) -> String {
        name.isEmpty ? "an empty name" : "'\(String(name.prefix(40)).replacing("\0", with: "\\0"))'"
    }
}
