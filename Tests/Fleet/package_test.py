#!/usr/bin/env python3
"""The Debian package on this machine, as a new operator meets it (`make dist` first; needs root).

1. `dpkg -i dist/skynet_*.deb`: the binary, man pages, completions, units, the skynet user and
   its directories.
2. `systemd-analyze verify` accepts both units (an instance of the worker template); the offline
   security review rates them; `systemctl enable` a broker and two worker instances.
3. Two hosts (network namespaces): the broker's unit runs on one, worker instances 1 and 2 on the
   other, each as its unit's ExecStart with its environment files, as user skynet (systemd is not
   PID 1 here, so the test starts what systemd would). CURVE on; the workers have no broker
   address: they find it by its beacon (--discover). A job from a third host runs on both workers.
4. SIGTERM (the units' KillSignal) stops each within its TimeoutStopSec, exit 0.
5. `dpkg --purge skynet` leaves nothing: no binary, user, /etc/skynet, /var/lib/skynet or unit links.
6. Under a real systemd: systemd-nspawn boots this machine's own root through an overlay (so nothing
   lands here) and, inside, the package is installed and `systemctl enable --now` starts a broker
   and two workers with every hardening setting of their units; a job runs; a worker allowed to run
   commands (the exec.conf drop-in) writes where ReadWritePaths= says and nowhere else;
   `systemctl stop` ends each with Result=success.
"""
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402
import units  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNITS = "/lib/systemd/system"


def fail(message):
    print(f"package test: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def run(*argv, check=True, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)
    if check and result.returncode != 0:
        fail(f"{' '.join(argv)} exited {result.returncode}: {(result.stderr or result.stdout).strip()[-800:]}")
    return result


def step(text):
    print(f"package test: {text}", flush=True)


class Service:
    """A unit's ExecStart running on a host, as systemd would start it."""

    def __init__(self, hosts, host, unit, instance=None):
        path = os.path.join(UNITS, unit)
        self.name = unit.replace("@.", f"@{instance}.") if instance else unit
        argv, environment, user, group, self.timeout = units.command(path, instance)
        self.log = tempfile.NamedTemporaryFile(prefix=f"{self.name}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(
            hosts.launcher(host) + units.launcher(user, group) + argv,
            env=environment, cwd="/", stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def output(self):
        with open(self.log.name) as file:
            return file.read()

    def wait_for(self, needle, seconds=20):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if needle in self.output():
                return
            if self.process.poll() is not None:
                fail(f"{self.name} exited {self.process.returncode}:\n{self.output()[-2000:]}")
            time.sleep(0.1)
        fail(f"{self.name}: no '{needle}' within {seconds} s:\n{self.output()[-2000:]}")

    def stop(self):
        """SIGTERM, as systemctl stop does; exit 0 within TimeoutStopSec."""
        started = time.time()
        self.process.terminate()
        try:
            code = self.process.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            fail(f"{self.name} did not stop within TimeoutStopSec={self.timeout:g}")
        if code != 0:
            fail(f"{self.name} exited {code} on SIGTERM:\n{self.output()[-2000:]}")
        return time.time() - started


def check_installed(deb, version):
    step(f"dpkg -i {os.path.basename(deb)}")
    run("dpkg", "-i", deb)
    installed = run("/usr/bin/skynet", "--version").stdout.strip()
    if installed != version:
        fail(f"/usr/bin/skynet --version says {installed}, the package is {version}")
    files = run("dpkg", "-L", "skynet").stdout.split()
    for expected in ["/usr/bin/skynet", "/usr/share/man/man1/skynet.1.gz", "/usr/share/man/man1/skynet.worker.1.gz",
                     "/usr/share/bash-completion/completions/skynet", "/usr/share/zsh/vendor-completions/_skynet",
                     "/usr/share/fish/vendor_completions.d/skynet.fish", f"{UNITS}/skynet-broker.service",
                     f"{UNITS}/skynet-worker@.service", "/etc/skynet/broker.env", "/etc/skynet/worker.env"]:
        if expected not in files:
            fail(f"the package does not install {expected}")
    user = pwd.getpwnam("skynet")
    if user.pw_uid >= 1000 or user.pw_shell != "/usr/sbin/nologin":
        fail(f"the skynet user is not a system account without a shell: {user}")
    for path, owner, mode in [("/var/lib/skynet", "skynet", 0o750), ("/etc/skynet", "root", 0o750),
                              ("/etc/skynet/keys", "skynet", 0o700)]:
        info = os.stat(path)
        if pwd.getpwuid(info.st_uid).pw_name != owner or info.st_mode & 0o777 != mode:
            fail(f"{path} is {pwd.getpwuid(info.st_uid).pw_name} {oct(info.st_mode & 0o777)}, not {owner} {oct(mode)}")
    if "skynet worker" not in run("zcat", "/usr/share/man/man1/skynet.worker.1.gz").stdout.replace("\\-", "-"):
        fail("the worker's man page does not describe `skynet worker`")
    completion = open("/usr/share/bash-completion/completions/skynet").read()
    if "--discover" not in completion or "--announce" not in completion:
        fail("the bash completion does not know --discover and --announce (not generated from this binary?)")


def check_units():
    step("systemd-analyze verify skynet-broker.service skynet-worker@1.service")
    verify = run("systemd-analyze", "verify", f"{UNITS}/skynet-broker.service", "skynet-worker@1.service", check=False)
    if verify.returncode != 0 or verify.stderr.strip() or verify.stdout.strip():
        fail(f"systemd-analyze verify: {(verify.stderr + verify.stdout).strip()}")
    for unit in ["skynet-broker.service", "skynet-worker@1.service"]:
        review = run("systemd-analyze", "security", "--offline=true", unit, check=False)
        line = [text for text in review.stdout.splitlines() if "Overall exposure level" in text]
        if not line:
            fail(f"systemd-analyze security --offline {unit}: {review.stderr.strip()}")
        exposure = float(line[0].split(":")[1].split()[0])
        step(f"  {line[0].strip()}")
        if exposure > 3.0:
            fail(f"{unit}: exposure {exposure} is above 3.0 (\"OK\" or better expected)")
    step("systemctl enable skynet-broker skynet-worker@1 skynet-worker@2")
    enabled = ["skynet-broker.service", "skynet-worker@1.service", "skynet-worker@2.service"]
    run("systemctl", "enable", *enabled)
    for unit in enabled:
        state = run("systemctl", "is-enabled", unit, check=False).stdout.strip()
        if state != "enabled":
            fail(f"systemctl is-enabled {unit}: {state}")


def configure_keys():
    """As README "Running on many hosts" says: keys made as root, then given to the skynet user."""
    keys = "/etc/skynet/keys"
    for name in ["broker", "worker", "coordinator"]:
        run("/usr/bin/skynet", "keygen", name, "--dir", keys)
    os.makedirs(f"{keys}/allow/workers")
    os.makedirs(f"{keys}/allow/coordinators")
    run("cp", f"{keys}/worker.key", f"{keys}/allow/workers/")
    run("cp", f"{keys}/coordinator.key", f"{keys}/allow/coordinators/")
    run("chown", "-R", "skynet:skynet", keys)
    with open("/etc/skynet/broker.env", "w") as file:
        file.write(
            "SKYNET_BROKER_OPTIONS=--frontend tcp://*:5555 --backend tcp://*:5556 "
            "--journal /var/lib/skynet/broker.journal --announce --heartbeat 500ms "
            f"--curve-secret {keys}/broker.key_secret --allow-workers {keys}/allow/workers "
            f"--allow-coordinators {keys}/allow/coordinators\n"
        )
    with open("/etc/skynet/worker.env", "w") as file:
        file.write(
            "SKYNET_WORKER_OPTIONS=--slots 2 --discover --heartbeat 500ms\n"
            f"SKYNET_CURVE_SECRET={keys}/worker.key_secret\nSKYNET_BROKER_KEY={keys}/broker.key\n"
        )


def run_fleet():
    services = []
    try:
        with netns.Hosts(["broker", "workers", "coordinator"]) as hosts:
            step("skynet-broker.service on host 'broker'; skynet-worker@1 and @2 on host 'workers' (--discover)")
            broker = Service(hosts, "broker", "skynet-broker.service")
            services.append(broker)
            broker.wait_for("announcing on the local network")
            workers = [Service(hosts, "workers", "skynet-worker@.service", instance) for instance in ("1", "2")]
            services.extend(workers)
            for worker in workers:
                worker.wait_for("registered with the broker")
                if f"broker=tcp://{hosts.addresses['broker']}:5556" not in worker.output():
                    fail(f"{worker.name} did not register with the broker it heard:\n{worker.output()[-1500:]}")
            step("a job from host 'coordinator' with the installed binary")
            keys = "/etc/skynet/keys"
            submit = subprocess.run(
                hosts.launcher("coordinator") + [
                    "/usr/bin/skynet", "submit", "--broker", f"tcp://{hosts.addresses['broker']}:5555",
                    "--sectors", "40", "--work", "20ms", "--json", "--curve-secret", f"{keys}/coordinator.key_secret",
                    "--broker-key", f"{keys}/broker.key"],
                capture_output=True, text=True, timeout=60)
            if submit.returncode != 0:
                fail(f"skynet submit exited {submit.returncode}: {submit.stderr.strip()[-1500:]}")
            results = [json.loads(line) for line in submit.stdout.splitlines() if line.startswith('{"id"')]
            systems = {result["system"] for result in results}
            if len(results) != 40 or any(result["status"] != "completed" for result in results):
                fail(f"the job did not complete 40 tasks: {submit.stdout[-1500:]}")
            host = units.socket.gethostname()
            if systems != {f"{host}-1", f"{host}-2"}:
                fail(f"the tasks ran on {sorted(systems)}, not on both worker instances")
            step(f"40 tasks completed on {', '.join(sorted(systems))}")
            for service, said in [(workers[0], "drained"), (workers[1], "drained"), (broker, "broker stopped")]:
                seconds = service.stop()
                if said not in service.output():
                    fail(f"{service.name} did not say '{said}' on SIGTERM:\n{service.output()[-1500:]}")
                step(f"  {service.name}: SIGTERM → exit 0 in {seconds:.1f} s (TimeoutStopSec={service.timeout:g})")
            journal = "/var/lib/skynet/broker.journal"
            if not os.path.exists(journal) or pwd.getpwuid(os.stat(journal).st_uid).pw_name != "skynet":
                fail(f"no journal owned by skynet at {journal}")
    finally:
        for service in services:
            if service.process.poll() is None:
                service.process.kill()
                service.process.wait()
            os.unlink(service.log.name)


def purge():
    step("dpkg --purge skynet")
    run("dpkg", "--purge", "skynet")
    left = [path for path in ["/usr/bin/skynet", "/etc/skynet", "/var/lib/skynet", f"{UNITS}/skynet-broker.service"]
            if os.path.exists(path)]
    left += glob.glob("/etc/systemd/system/*.wants/skynet-*")
    if left:
        fail(f"the purge left {left}")
    if subprocess.run(["getent", "passwd", "skynet"], capture_output=True).returncode == 0:
        fail("the purge left the skynet user")


NSPAWN_SCRIPT = r"""#!/bin/sh
# Inside the booted container: the package as an operator uses it. Each check prints one line.
exec > /nsp/out/log 2>&1
set -x
dpkg -i /nsp/skynet.deb || echo "FAIL dpkg -i"
mkdir -p /srv/skynet/output /etc/systemd/system/skynet-worker@2.service.d
chown skynet: /srv/skynet/output
# Instance 2 runs commands, as exec.conf says (with --insecure: the broker is on loopback, no CURVE).
echo 'SKYNET_WORKER_OPTIONS=--slots 2 --insecure --allow-command /usr/bin/touch' > /etc/skynet/worker-2.env
cp /usr/share/doc/skynet/examples/exec.conf /etc/systemd/system/skynet-worker@2.service.d/
systemctl daemon-reload
systemctl enable --now skynet-broker skynet-worker@1 skynet-worker@2 || echo "FAIL enable --now"
for i in $(seq 50); do
    [ "$(skynet status --json 2>/dev/null | grep -o '"workers_registered":[0-9]*')" = '"workers_registered":2' ] && break
    sleep 0.2
done
active=$(systemctl is-active skynet-broker skynet-worker@1 skynet-worker@2 | tr '\n' ' ')
echo "ACTIVE ${active% }"
timeout 60 skynet submit --sectors 40 --work 20ms --no-progress --json > /nsp/out/job.jsonl; echo "JOB $?"
printf '/srv/skynet/output/allowed\n/var/lib/skynet/denied\n/etc/denied\n' > /tmp/inputs
timeout 60 skynet submit --exec '/usr/bin/touch {}' --inputs /tmp/inputs --retry none --json --no-progress > /nsp/out/exec.jsonl; echo "EXEC $?"
for path in /srv/skynet/output/allowed /var/lib/skynet/denied /etc/denied; do
    [ -e "$path" ] && echo "EXISTS $path" || echo "ABSENT $path"
done
systemctl stop skynet-worker@1 skynet-worker@2 skynet-broker
for unit in skynet-broker skynet-worker@1 skynet-worker@2; do
    echo "STOPPED $unit $(systemctl show -p Result --value $unit) $(systemctl show -p ExecMainStatus --value $unit)"
done
journalctl --no-pager -u skynet-broker -u 'skynet-worker@*' | grep -E 'drained|broker stopped|denied|error' | tail -20
systemd-analyze security --no-pager skynet-broker skynet-worker@1 | grep -i overall
echo DONE
systemctl poweroff
"""

NSPAWN_UNIT = """[Unit]
Description=skynet package check
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/sh /nsp/run.sh
[Install]
WantedBy=multi-user.target
"""


def check_under_systemd(deb):
    """The units under a real systemd (PID 1 in a container booted from this machine's root)."""
    if not shutil.which("systemd-nspawn"):
        fail("systemd-nspawn is missing: apt-get install -y systemd-container")
    step("under a real systemd: systemd-nspawn boots this root through an overlay")
    work = tempfile.mkdtemp(prefix="skynet-nspawn-")
    layers, root, shared = f"{work}/layers", f"{work}/root", f"{work}/nsp"
    for directory in (layers, root, f"{shared}/out"):
        os.makedirs(directory, exist_ok=True)
    mounted = []
    try:
        run("mount", "-t", "tmpfs", "tmpfs", layers)
        mounted.append(layers)
        os.makedirs(f"{layers}/upper")
        os.makedirs(f"{layers}/work")
        run("mount", "-t", "overlay", "overlay", "-o", f"lowerdir=/,upperdir={layers}/upper,workdir={layers}/work", root)
        mounted.append(root)
        shutil.copy(deb, f"{shared}/skynet.deb")
        with open(f"{shared}/run.sh", "w") as file:
            file.write(NSPAWN_SCRIPT)
        with open(f"{root}/etc/systemd/system/skynet-check.service", "w") as file:
            file.write(NSPAWN_UNIT)
        os.makedirs(f"{root}/nsp", exist_ok=True)
        started = time.time()
        console = subprocess.run(
            ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "-D", root, f"--bind={shared}:/nsp",
             f"--machine=skynet-check-{os.getpid()}", "--boot", "--", "systemd.firstboot=off",
             "systemd.wants=skynet-check.service"],
            capture_output=True, text=True, timeout=300)
        log = open(f"{shared}/out/log").read() if os.path.exists(f"{shared}/out/log") else ""
        if "DONE" not in log:
            fail(f"the check inside systemd-nspawn did not finish (exit {console.returncode}):\n{log[-2000:]}\n{console.stdout[-1500:]}")
        lines = log.splitlines()
        for expected in ["ACTIVE active active active", "JOB 0", "EXISTS /srv/skynet/output/allowed",
                         "ABSENT /var/lib/skynet/denied", "ABSENT /etc/denied",
                         "STOPPED skynet-broker success 0", "STOPPED skynet-worker@1 success 0",
                         "STOPPED skynet-worker@2 success 0"]:
            if not any(line.strip() == expected for line in lines):
                fail(f"under systemd: no '{expected}' in:\n{log[-3000:]}")
        if "FAIL" in [line.split()[0] for line in lines if line.strip()]:
            fail(f"under systemd:\n{log[-3000:]}")
        results = [json.loads(line) for line in open(f"{shared}/out/job.jsonl") if line.startswith('{"id"')]
        if len(results) != 40 or {result["status"] for result in results} != {"completed"}:
            fail(f"under systemd: the job did not complete 40 tasks: {open(f'{shared}/out/job.jsonl').read()[-800:]}")
        commands = sorted(json.loads(line)["status"] for line in open(f"{shared}/out/exec.jsonl") if line.startswith('{"id"'))
        if commands != ["completed", "failed", "failed"]:
            fail(f"under systemd: commands ended {commands}, not one completed (the listed path) and two failed")
        step(f"  enable --now, a job on both workers; touch: {commands} (only ReadWritePaths= writable); stopped with Result=success")
        for line in lines:
            if "Overall exposure level" in line:
                step(f"  {line.strip()}")
        step(f"  ({time.time() - started:.0f} s with the boot and the poweroff)")
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", path], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def main():
    if os.getuid() != 0:
        # As the Swift tests that need namespaces: skipped, loudly, when not root (CI runs as root).
        print("package test: SKIPPED: needs root (dpkg -i, network namespaces)", file=sys.stderr)
        sys.exit(0)
    debs = sorted(glob.glob(os.path.join(ROOT, "dist", "skynet_*.deb")))
    if not debs:
        fail("no dist/skynet_*.deb: run `make dist` first")
    if subprocess.run(["dpkg", "-s", "skynet"], capture_output=True).returncode == 0:
        fail("a skynet package is already installed here; this test installs and purges its own: dpkg --purge skynet")
    version = run("dpkg-deb", "-f", debs[-1], "Version").stdout.strip()
    depends = run("dpkg-deb", "-f", debs[-1], "Depends").stdout.strip()
    if "libzmq5" not in depends:
        fail(f"the package does not depend on the distribution's libzmq5 (Depends: {depends})")
    try:
        check_installed(debs[-1], version)
        check_units()
        configure_keys()
        run_fleet()
    finally:
        if subprocess.run(["dpkg", "-s", "skynet"], capture_output=True).returncode == 0:
            purge()
    check_under_systemd(debs[-1])
    size = os.path.getsize(debs[-1])
    print(f"package test: ok — {os.path.basename(debs[-1])} ({size / 1e6:.1f} MB) installed, ran a job on 2 hosts, purged; and under systemd")


if __name__ == "__main__":
    main()
