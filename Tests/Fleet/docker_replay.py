#!/usr/bin/env python3
"""Replays the Dockerfile's build stage outside Docker (no engine or base image is needed here).

The build context is the working tree filtered by .dockerignore; every COPY of the build stage
copies from it into a scratch directory standing for WORKDIR, and every RUN runs literally, in a
private mount namespace where /usr/local/bin is an empty tmpfs (so nothing lands on this machine)
and the WORKDIR path stands for the scratch directory. `apt-get` steps are checked, not run: the
packages they install must be installed here. The runtime stage's COPY --from=build must then find
its file, the binary must run, and each library it links must come from a package the runtime stage
installs (or Debian's base). Exit 0 when the stage replays; otherwise one line says which step broke.

  python3 Tests/Fleet/docker_replay.py [--keep DIR]
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Always in debian:bookworm-slim (essential or required by it).
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def fail(message):
    print(f"docker replay: {message}", file=sys.stderr)
    sys.exit(1)


def instructions(path):
    """The Dockerfile as (keyword, argument) pairs: continuations joined, comments dropped."""
    lines, current = [], ""
    with open(path) as file:
        for raw in file:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            current += line
            keyword, _, argument = current.strip().partition(" ")
            lines.append((keyword.upper(), argument.strip()))
            current = ""
    return lines


def stages(steps):
    """name → steps, in order."""
    result, name = {}, None
    for keyword, argument in steps:
        if keyword == "FROM":
            parts = argument.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else parts[0]
            result[name] = []
        elif name is not None:
            result[name].append((keyword, argument))
    return result


def pattern_regex(pattern):
    """A .dockerignore pattern (Go filepath.Match plus **) as a regex over a relative path."""
    pattern = pattern.strip().strip("/")
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out += "(?:/)?"
                i += 1
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile("^" + out + "$")


def ignore_rules(path):
    rules = []
    if os.path.exists(path):
        with open(path) as file:
            for line in file:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                negate = line.startswith("!")
                rules.append((negate, pattern_regex(line[1:] if negate else line)))
    return rules


def ignored(relative, rules):
    """Docker's rule: the last pattern matching the path or one of its parent directories wins."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for negate, regex in rules:
        if any(regex.match(prefix) for prefix in prefixes):
            verdict = not negate
    return verdict


def context_files(rules):
    """The build context: the working tree (git's files plus untracked, not ignored by git) minus .dockerignore."""
    listed = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")
    return sorted(path for path in listed if path and os.path.exists(os.path.join(ROOT, path)) and not ignored(path, rules))


def copy(argument, files, workdir, scratch):
    sources_and_dest = shlex.split(argument)
    if any(part.startswith("--") for part in sources_and_dest):
        fail(f"COPY {argument}: flags are not replayed")
    *sources, dest = sources_and_dest
    target = os.path.join(scratch, os.path.relpath(os.path.join(workdir, dest), workdir))
    copied = 0
    for source in sources:
        source = os.path.normpath(source)
        for path in files:
            if source == "." or path == source or path.startswith(source + "/"):
                relative = path if source == "." else os.path.relpath(path, os.path.dirname(source) or ".")
                if path == source and not dest.endswith("/") and len(sources) == 1 and dest not in (".", "./"):
                    out = target
                else:
                    out = os.path.join(target, relative)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                shutil.copy2(os.path.join(ROOT, path), out)
                copied += 1
        if copied == 0:
            fail(f"COPY {argument}: '{source}' is not in the build context (see .dockerignore)")
    return copied


def check_apt(argument):
    """An apt-get step: its packages must be installed here (the replay does not install)."""
    words = shlex.split(argument.replace("&&", " && "))
    packages, collecting = [], False
    for word in words:
        if word == "install":
            collecting = True
        elif word == "&&":
            collecting = False
        elif collecting and not word.startswith("-"):
            packages.append(word)
    for package in packages:
        if subprocess.run(["dpkg", "-s", package], capture_output=True).returncode != 0:
            fail(f"the Dockerfile installs {package}, which is not installed here: apt-get install -y {package}")
    return packages


def run(argument, workdir, scratch, binary_out):
    mounts = re.findall(r"--mount=(\S+)", argument)
    command = re.sub(r"--mount=\S+\s*", "", argument)
    for mount in mounts:
        fields = dict(field.split("=", 1) for field in mount.split(",") if "=" in field)
        if fields.get("type") != "cache":
            fail(f"RUN --mount={mount}: only cache mounts are replayed")
        # A cache mount starts empty on a machine that never built the image.
        os.makedirs(fields["target"].replace(workdir, scratch, 1), exist_ok=True)
    command = command.replace(workdir, scratch)
    # /usr/local/bin is a private, empty tmpfs for the step; what the step puts there is kept.
    script = (
        "set -e; mount --make-rprivate /; mount -t tmpfs tmpfs /usr/local/bin; "
        f"cd {shlex.quote(scratch)}; ( {command} ); "
        f"mkdir -p {shlex.quote(binary_out)}; cp -a /usr/local/bin/. {shlex.quote(binary_out)}/"
    )
    print(f"docker replay: RUN {command[:200]}", flush=True)
    result = subprocess.run(["unshare", "--mount", "sh", "-c", script])
    if result.returncode != 0:
        fail(f"RUN {command[:120]}... exited {result.returncode}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", help="replay in this directory and keep it (default: a temporary one)")
    args = parser.parse_args()
    if os.getuid() != 0:
        # As the Swift tests that need namespaces: skipped, loudly, when not root (CI runs as root).
        print("docker replay: SKIPPED: needs root (a private mount namespace for the RUN steps)", file=sys.stderr)
        sys.exit(0)
    all_stages = stages(instructions(os.path.join(ROOT, "Dockerfile")))
    if "build" not in all_stages or "runtime" not in all_stages:
        fail("the Dockerfile has no 'build' or 'runtime' stage")
    rules = ignore_rules(os.path.join(ROOT, ".dockerignore"))
    files = context_files(rules)
    scratch = args.keep or tempfile.mkdtemp(prefix="skynet-docker-replay-")
    os.makedirs(scratch, exist_ok=True)
    local_bin = os.path.join(scratch, ".replay-usr-local-bin")
    workdir = "/"
    try:
        for keyword, argument in all_stages["build"]:
            if keyword == "WORKDIR":
                workdir = argument
            elif keyword == "COPY":
                count = copy(argument, files, workdir, scratch)
                print(f"docker replay: COPY {argument} ({count} files)", flush=True)
            elif keyword == "RUN":
                if "apt-get" in argument:
                    print(f"docker replay: apt-get (installed here: {' '.join(check_apt(argument))})")
                else:
                    run(argument, workdir, scratch, local_bin)
            elif keyword not in ("ENV", "ARG", "LABEL"):
                fail(f"{keyword} in the build stage is not replayed")
        runtime_packages = set(BASE_PACKAGES)
        for keyword, argument in all_stages["runtime"]:
            if keyword == "RUN" and "apt-get" in argument:
                runtime_packages.update(check_apt(argument))
            if keyword == "COPY" and argument.startswith("--from=build"):
                source = shlex.split(argument)[1]
                if not source.startswith("/usr/local/bin/"):
                    fail(f"COPY {argument}: only /usr/local/bin is replayed")
                binary = os.path.join(local_bin, os.path.relpath(source, "/usr/local/bin"))
                if not os.path.isfile(binary):
                    fail(f"COPY {argument}: the build stage did not make {source}")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True)
        if version.returncode != 0:
            fail(f"the built skynet --version exited {version.returncode}: {version.stderr.strip()}")
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", subprocess.run(
            ["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout)
        resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(
            ["ldd", binary], capture_output=True, text=True).stdout, re.M))
        for library in needed:
            path = resolved.get(library)
            if path is None:
                continue  # the dynamic loader itself
            real = os.path.realpath(path)
            owner = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
            if owner.returncode != 0:
                owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
            package = owner.stdout.split(":")[0] if owner.returncode == 0 else "?"
            if package not in runtime_packages:
                fail(f"the binary needs {library} (package {package}), which the runtime stage does not install")
        print(f"docker replay: ok — {version.stdout.strip()}; links {', '.join(needed)}")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
