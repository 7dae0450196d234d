#!/usr/bin/env python3
"""Instructions per task with deep credit, by process: SkyNet's CLI path against the C relay.

    python3 bench/deep_instructions.py [--small N] [--large N] [--top K] [--no-baseline]

The deep-credit workload of `make bench` (issue 28), counted instead of timed: `skynet broker`,
`skynet worker --slots 64` and `skynet submit --sectors N --work 0` (no-op tasks, printed as
results as a user sees them), each process under valgrind's callgrind with `--idle-spin 0` (polling
loops would add instructions that vary with timing), run with N and then M tasks; the difference
divided by M - N is what one task costs each process, all its threads together (start-up, warm-up and
shutdown cancel out). The C relay (`make baseline`: broker, a worker with 64 credits, the client
sending N no-op tasks) is counted the same way. Counts are user-space instructions (callgrind does not
see the kernel). JSON status and listening lines are left out of both runs' counts: they
come once a run, and whether the broker's answer to a job's one STATUS question fell in the shorter
run depended on timing (`one_time_json`). With --top K it prints the K functions that cost each
SkyNet process the most instructions of their own per task.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from instructions import check_binary, demangle, free_port, run_beside, sigint_default

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKYNET = os.environ.get("SKYNET_BIN") or os.path.join(ROOT, ".build", "release", "skynet")
BASELINE = os.path.join(ROOT, ".build", "baseline")
ENTRY = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)  (.*)")


def grind(directory, tag, command):
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.join(directory, tag)}.out", *command]


def stop(servers):
    # SIGINT ends them (valgrind writes its counts on the way out); SIGKILL if that did not.
    for server in reversed(servers):
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def run_skynet(binary, tasks, directory):
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "preexec_fn": sigint_default}
    servers = [subprocess.Popen(grind(directory, f"broker-{tasks}", [
        binary, "broker", "--frontend", front, "--backend", back, "--idle-spin", "0"]), **quiet)]
    try:
        time.sleep(3)
        servers.append(subprocess.Popen(grind(directory, f"worker-{tasks}", [
            binary, "worker", "--broker", back, "--slots", "64", "--idle-spin", "0"]), **quiet))
        time.sleep(3)
        done = subprocess.run(grind(directory, f"submit-{tasks}", [
            binary, "submit", "--broker", front, "--sectors", str(tasks), "--work", "0", "--no-progress",
            "--idle-spin", "0"]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"error: skynet submit under valgrind failed: {done.stderr.strip()[-400:]}")
    finally:
        stop(servers)
    return {name: os.path.join(directory, f"{name}-{tasks}.out") for name in ("broker", "worker", "submit")}


def run_c(tasks, directory):
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    servers = [subprocess.Popen(grind(directory, f"c-broker-{tasks}", [os.path.join(BASELINE, "broker"), front, back]),
                                stderr=subprocess.DEVNULL, preexec_fn=sigint_default)]
    try:
        time.sleep(1)
        servers.append(subprocess.Popen(grind(directory, f"c-worker-{tasks}", [
            os.path.join(BASELINE, "worker"), back, "64"]), stderr=subprocess.DEVNULL, preexec_fn=sigint_default))
        time.sleep(1)
        done = run_beside([("C broker", servers[0]), ("C worker", servers[1])], grind(directory, f"c-client-{tasks}", [
            os.path.join(BASELINE, "client"), front, "throughput", str(tasks)]), "the C client")
        if done.returncode != 0:
            sys.exit(f"error: the C client under valgrind failed: {done.stderr.strip()[-400:]}")
    finally:
        stop(servers)
    return {name: os.path.join(directory, f"c-{name}-{tasks}.out") for name in ("broker", "worker", "client")}


def one_time_json(path):
    """Instructions a process spent on JSON status and listening lines (`JSONLine.json()` and
    `JSONLine.parse`, inclusive). They come once a run, not per task: the broker's answer to the one
    STATUS question of a job past its first second (`Coordinator.checkKinds`: ~9.5 M instructions of
    Foundation's JSONEncoder at the broker, ~11 M to decode it in `skynet submit`) fell in one run
    and not the other depending on timing, which moved a count per task by ~240. So both runs leave
    them out."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=yes", path], capture_output=True,
                         text=True, check=True).stdout
    spent = 0
    for line in out.splitlines():
        match = ENTRY.match(line)
        if match and re.search(r"8JSONLinePAAE(4jsonSSyF|5parseyxSSKFZ)\w* ", match.group(2) + " "):
            spent += int(match.group(1).replace(",", ""))
    return spent


def functions(path):
    """(total, {function: own instructions}) of one process, all its threads; the total without
    `one_time_json(path)`."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True, text=True,
                         check=True).stdout
    total, found = 0, {}
    for line in out.splitlines():
        match = ENTRY.match(line)
        if not match:
            continue
        if "PROGRAM TOTALS" in match.group(2):
            total = int(match.group(1).replace(",", ""))
            continue
        name = re.sub(r" \[/.*", "", match.group(2)).split(":", 1)[-1]
        found[name] = found.get(name, 0) + int(match.group(1).replace(",", ""))
    if total == 0:
        for line in out.splitlines():
            if "PROGRAM TOTALS" in line:
                total = int(line.split()[0].replace(",", ""))
    return total - one_time_json(path), found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=20000, help="tasks of the first run (default 20,000)")
    parser.add_argument("--large", type=int, default=60000, help="tasks of the second run (default 60,000)")
    parser.add_argument("--top", type=int, default=0, help="also print each SkyNet process's top K functions")
    parser.add_argument("--skynet", default=SKYNET, help="the skynet binary (default: the release build)")
    parser.add_argument("--no-baseline", action="store_true", help="count SkyNet only, not the C relay")
    options = parser.parse_args()
    if options.large <= options.small:
        sys.exit("error: --large must be more than --small")
    check_binary(options.skynet)
    for tool in ("valgrind", "callgrind_annotate", "objcopy"):
        if shutil.which(tool) is None:
            sys.exit(f"error: {tool} is missing (apt-get install -y valgrind binutils)")
    if not options.no_baseline and not os.path.exists(os.path.join(BASELINE, "client")):
        sys.exit("error: no C baseline; run `make baseline` first (or pass --no-baseline)")
    span = options.large - options.small
    with tempfile.TemporaryDirectory(prefix="skynet-deep-instructions-") as directory:
        # Without DWARF (symbols kept): valgrind 3.x gives up on this build's debug info.
        binary = os.path.join(directory, "skynet-nodebug")
        subprocess.run(["objcopy", "--strip-debug", options.skynet, binary], check=True)
        counted = {}
        for tasks in (options.small, options.large):
            print(f"SkyNet, {tasks:,} tasks under callgrind…", file=sys.stderr, flush=True)
            for name, path in run_skynet(binary, tasks, directory).items():
                counted.setdefault(name, {})[tasks] = functions(path)
            if not options.no_baseline:
                print(f"C relay, {tasks:,} tasks under callgrind…", file=sys.stderr, flush=True)
                for name, path in run_c(tasks, directory).items():
                    counted.setdefault(f"C {name}", {})[tasks] = functions(path)
    print(f"instructions per task, 1 worker x 64 credits, no-op tasks ({options.large:,} - {options.small:,} "
          "tasks, callgrind, user space)")
    totals = {}
    for side, names in (("SkyNet (skynet broker, worker --slots 64, submit)", ("broker", "worker", "submit")),
                        ("C relay (broker, worker with 64 credits, client)", ("C broker", "C worker", "C client"))):
        if names[0] not in counted:
            continue
        print(side)
        grand = 0
        for name in names:
            per = (counted[name][options.large][0] - counted[name][options.small][0]) / span
            grand += per
            print(f"  {name.removeprefix('C '):10} {per:10,.0f}")
        print(f"  {'total':10} {grand:10,.0f}")
        totals[side] = grand
    if len(totals) == 2:
        skynet, c = totals.values()
        print(f"SkyNet/C: {skynet / c:.2f}x the instructions per task")
    if options.top > 0:
        for name in ("broker", "worker", "submit"):
            small, large = counted[name][options.small][1], counted[name][options.large][1]
            rows = sorted(((large.get(k, 0) - small.get(k, 0)) / span, k) for k in set(small) | set(large))
            rows = [row for row in reversed(rows) if row[0] > 0][:options.top]
            print(f"top {options.top} of {name} (own instructions per task)")
            for (per, _), pretty in zip(rows, demangle([k for _, k in rows])):
                print(f"  {per:8,.0f}  {pretty[:150]}")


if __name__ == "__main__":
    main()
