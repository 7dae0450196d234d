#!/usr/bin/env python3
"""CPU per task, by process and thread: SkyNet's throughput workload against the C baseline.

    python3 bench/cpu.py [--tasks N] [--workers N] [--slots N]

Runs `skynet bench throughput` (the release build, `make release`) and the C baseline (`make
baseline`) once each with the same tasks, workers and slots (credits), samples the CPU time of every
thread of every process they start from /proc every 50 ms, and prints microseconds of user and
kernel time per task for each process's main thread (a SkyNet reactor, or the C program's loop) and
for the libzmq I/O threads, with the total, the tasks per second and the voluntary context switches
per task. The last samples are taken just before the processes exit, so a few milliseconds of a run
may be missed; the figures are for comparing the two programs side by side, not to the microsecond.
"""
import argparse
import collections
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKYNET = os.path.join(ROOT, ".build", "release", "skynet")
BASELINE = os.path.join(ROOT, ".build", "baseline")
HZ = os.sysconf("SC_CLK_TCK")


def descendants(pid):
    found = [pid]
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as children:
                for child in children.read().split():
                    found += descendants(int(child))
    except OSError:
        pass
    return found


def role(pid):
    """broker, worker or client: from the program's arguments."""
    with open(f"/proc/{pid}/cmdline") as cmdline:
        args = cmdline.read().split("\0")
    name = os.path.basename(args[0])
    if name == "skynet":
        return {"bench": "client", "broker": "broker", "worker": "worker"}.get(args[1], args[1])
    return name


def sample(root, seen):
    """Adds the CPU times of every thread below `root` to `seen` (the latest value wins)."""
    for pid in descendants(root):
        try:
            who = role(pid)
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                    text = stat.read()
                with open(f"/proc/{pid}/task/{tid}/status") as status:
                    switches = int(status.read().split("voluntary_ctxt_switches:")[1].split()[0])
                comm = text[text.index("(") + 1 : text.rindex(")")]
                fields = text[text.rindex(")") + 2 :].split()
                seen[(pid, int(tid))] = (who, comm, int(fields[11]), int(fields[12]), switches)
        except (OSError, ValueError, IndexError):
            continue  # the thread or process ended between two reads


def measure(command, launcher=None):
    """Runs `command` (or the processes `launcher` starts), sampling until it ends."""
    seen = {}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    roots = [process.pid] + (launcher() if launcher else [])
    while process.poll() is None:
        for root in roots:
            sample(root, seen)
        time.sleep(0.05)
    output = process.stdout.read()
    table = collections.defaultdict(lambda: [0, 0, 0])
    for who, comm, user, kernel, switches in seen.values():
        kind = "libzmq I/O threads" if comm.startswith("ZMQbg/IO") else f"{who}: reactor and other threads"
        if comm.startswith("ZMQbg/Reaper"):
            continue
        table[kind][0] += user
        table[kind][1] += kernel
        table[kind][2] += switches
    return table, output


def last_json(output):
    import json

    lines = [line for line in output.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def free_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--slots", type=int, default=4)
    args = parser.parse_args()
    for program in (SKYNET, os.path.join(BASELINE, "client")):
        if not os.access(program, os.X_OK):
            sys.exit(f"error: {program} is missing; run 'make release baseline' first")

    skynet_table, skynet_out = measure(
        [SKYNET, "bench", "throughput", "--json", "--tasks", str(args.tasks), "--workers", str(args.workers),
         "--slots", str(args.slots)]
    )

    front, back = free_endpoint(), free_endpoint()
    helpers = [subprocess.Popen([os.path.join(BASELINE, "broker"), front, back])]
    try:
        time.sleep(0.1)
        for _ in range(args.workers):
            helpers.append(subprocess.Popen([os.path.join(BASELINE, "worker"), back, str(args.slots)]))
        time.sleep(0.2)
        c_table, c_out = measure(
            [os.path.join(BASELINE, "client"), front, "throughput", str(args.tasks)],
            launcher=lambda: [helper.pid for helper in helpers],
        )
    finally:
        for helper in helpers:
            helper.kill()
            helper.wait()

    rates = (last_json(skynet_out).get("tasks_per_s", 0), last_json(c_out).get("tasks_per_s", 0))
    print(f"{args.tasks:,} no-op tasks, {args.workers} worker(s) x {args.slots} slots; "
          f"SkyNet {rates[0]:,.0f} tasks/s, C {rates[1]:,.0f} tasks/s")
    print(f"{'µs per task (user + kernel)':40} {'SkyNet':>16} {'C':>16}   switches/task")
    kinds = sorted(set(skynet_table) | set(c_table), key=lambda k: (k.startswith("libzmq"), k))
    totals = [0.0, 0.0]
    for kind in kinds:
        cells = []
        for index, table in enumerate((skynet_table, c_table)):
            user, kernel, switches = table.get(kind, (0, 0, 0))
            user_us, kernel_us = user / HZ * 1e6 / args.tasks, kernel / HZ * 1e6 / args.tasks
            totals[index] += user_us + kernel_us
            cells.append((f"{user_us:.1f} + {kernel_us:.1f}", switches / args.tasks))
        print(f"{kind:40} {cells[0][0]:>16} {cells[1][0]:>16}   {cells[0][1]:.2f} / {cells[1][1]:.2f}")
    print(f"{'total':40} {totals[0]:>16.1f} {totals[1]:>16.1f}")


if __name__ == "__main__":
    main()
