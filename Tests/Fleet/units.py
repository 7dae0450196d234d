"""What systemd would run for a unit, for hosts where systemd is not PID 1 (this test machine):
the unit file's ExecStart with its EnvironmentFile= and Environment= settings, specifiers and
$VARIABLE expansion, as its User= and Group=. The hardening settings are not applied here;
`systemd-analyze verify` and `systemd-analyze security --offline` check them."""
import os
import pwd
import re
import shlex
import socket


def parse(path):
    """section → {key: [values]} (a key may repeat: EnvironmentFile=, Environment=, ...)."""
    sections, section = {}, None
    with open(path) as file:
        text = file.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return sections


def specifiers(text, instance):
    replacements = {"i": instance or "", "I": instance or "", "H": socket.gethostname(), "%": "%"}
    return re.sub(r"%(.)", lambda m: replacements.get(m.group(1), m.group(0)), text)


def environment_file(path):
    values = {}
    with open(path) as file:
        for line in file:
            line = line.strip()
            if not line or line[0] in "#;" or "=" not in line:
                continue
            key, _, value = line.partition("=")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            values[key.strip()] = value
    return values


def command(unit_path, instance=None):
    """(argv, environment, user, group, stop timeout in seconds) for the unit's ExecStart."""
    service = parse(unit_path)["Service"]
    user = service.get("User", ["root"])[-1]
    group = service.get("Group", [user])[-1]
    home = pwd.getpwnam(user).pw_dir
    environment = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home,
                   "USER": user, "LOGNAME": user, "SHELL": pwd.getpwnam(user).pw_shell}
    for assignment in service.get("Environment", []):
        for word in shlex.split(specifiers(assignment, instance)):
            key, _, value = word.partition("=")
            environment[key] = value
    for entry in service.get("EnvironmentFile", []):
        optional = entry.startswith("-")
        path = specifiers(entry.lstrip("-"), instance)
        if not os.path.exists(path):
            if optional:
                continue
            raise FileNotFoundError(f"{unit_path}: EnvironmentFile {path} does not exist")
        environment.update(environment_file(path))
    (start,) = service["ExecStart"]
    argv = []
    for word in shlex.split(specifiers(start, instance)):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:  # $VAR alone: split into words (systemd.service(5), "Command lines")
            argv.extend(environment.get(whole.group(1), "").split())
        else:  # ${VAR} or $VAR inside a word: one word
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                               lambda m: environment.get(m.group(1) or m.group(2), ""), word))
    timeout = float(service.get("TimeoutStopSec", ["90"])[-1].rstrip("s"))
    return argv, environment, user, group, timeout


def launcher(user, group):
    """Runs a command as the unit's user and group, with no new privileges (as NoNewPrivileges=)."""
    return ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups", "--no-new-privs", "--"]
