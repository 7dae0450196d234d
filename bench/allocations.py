#!/usr/bin/env python3
"""Allocations per task with deep credit, by process: a count that does not depend on the clock.

    python3 bench/allocations.py [--small N] [--large N] [--check] [--skynet BINARY]

Runs `skynet broker`, `skynet worker --slots 64` and `skynet submit --sectors N --work 0` (no-op
tasks), each with a malloc counter preloaded (bench/malloc/count.c, built here with cc), first with N
tasks, then with M; (count with M - count with N) / (M - N) is what one task costs each process in
calls to malloc, calloc, realloc and the aligned allocators, all threads together (libzmq's I/O thread
too: its allocations are per message, so per BATCH). Start-up and shutdown cancel out.

--check compares them with the budgets below and exits 1 when a process is over its budget: `make
test` runs it, so a change that adds an allocation per task on a hot path fails there, whatever the
machine's speed. Each budget is what the process allocates today, with a little room for what is
allocated per batch (the broker and the worker allocate nothing per task; what is left in `skynet
submit` is the task's bytes as the API holds them, explained in docs/DESIGN.md §3).
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from instructions import check_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKYNET = os.environ.get("SKYNET_BIN") or os.path.join(ROOT, ".build", "release", "skynet")
COUNTER = os.path.join(ROOT, "bench", "malloc", "count.c")
# Allocations per task, at most (see docs/DESIGN.md §3 for what each one is).
# broker: none per task (0.07 measured: per BATCH; a sector task's 20-byte input is kept in place,
# TaskBytes); worker: none per task (0.06: per BATCH; a TASK's input is scanned where it arrived and
# the sector scanner's output written on the stack); submit: the task's input (1.02: a human listing
# keeps no sector's output, CoordinatorConfiguration.outputs, and writes its line on the stack).
BUDGETS = {"broker": 0.25, "worker": 0.25, "submit": 1.5}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def counts(binary, library, tasks, directory):
    """{process: allocations} for one run of `tasks` tasks."""
    out = os.path.join(directory, f"run-{tasks}")
    os.makedirs(out)
    env = dict(os.environ, LD_PRELOAD=library, SKYNET_MALLOC_COUNT_DIR=out)
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    broker = subprocess.Popen([binary, "broker", "--frontend", front, "--backend", back], **quiet)
    worker = None
    try:
        time.sleep(0.3)
        worker = subprocess.Popen([binary, "worker", "--broker", back, "--slots", "64"], **quiet)
        time.sleep(0.5)
        submit = subprocess.run([binary, "submit", "--broker", front, "--sectors", str(tasks), "--work", "0",
                                 "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, timeout=300)
        if submit.returncode != 0:
            sys.exit(f"error: skynet submit failed ({submit.returncode}): {submit.stderr.strip()[-400:]}")
        pids = {"submit": None, "worker": worker.pid, "broker": broker.pid}
    finally:
        # SIGTERM: both stop gracefully, so the counter's exit handler writes their counts.
        for process in (worker, broker):
            if process is None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    found = {}
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as file:
            found[int(name)] = int(file.read())
    result = {}
    for process, pid in pids.items():
        if pid is not None:
            if pid not in found:
                sys.exit(f"error: no allocation count from the {process} (pid {pid}); did it exit cleanly?")
            result[process] = found.pop(pid)
    if len(found) != 1:
        sys.exit(f"error: expected one count from skynet submit, found {len(found)}")
    result["submit"] = found.popitem()[1]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=20000, help="tasks of the first run (default 20,000)")
    parser.add_argument("--large", type=int, default=100000, help="tasks of the second run (default 100,000)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a process is over its budget")
    parser.add_argument("--skynet", default=SKYNET, help="the skynet binary (default: the release build)")
    options = parser.parse_args()
    if options.large <= options.small:
        sys.exit("error: --large must be more than --small")
    check_binary(options.skynet)
    with tempfile.TemporaryDirectory(prefix="skynet-allocations-") as directory:
        library = os.path.join(directory, "libcount.so")
        compiler = next((c for c in ("cc", "clang", "gcc") if shutil.which(c)), None)
        if compiler is None:
            sys.exit("error: no C compiler (cc, clang or gcc) to build the malloc counter; install build-essential")
        built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", library, COUNTER], capture_output=True,
                               text=True)
        if built.returncode != 0:
            sys.exit(f"error: building the malloc counter failed: {built.stderr.strip()[-400:]}")
        small = counts(options.skynet, library, options.small, directory)
        large = counts(options.skynet, library, options.large, directory)
    span = options.large - options.small
    print(f"allocations per task, 1 worker x 64 slots, no-op tasks through skynet submit "
          f"({options.large:,} - {options.small:,} tasks)")
    over = []
    for process in ("broker", "worker", "submit"):
        per = (large[process] - small[process]) / span
        budget = BUDGETS[process]
        verdict = "ok" if per <= budget else "OVER BUDGET"
        print(f"  {process:8} {per:7.2f}   budget {budget:5.2f}   {verdict}")
        if per > budget:
            over.append(process)
    if options.check and over:
        sys.exit(f"error: allocations per task over budget in {', '.join(over)} (bench/allocations.py)")


if __name__ == "__main__":
    main()
