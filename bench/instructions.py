#!/usr/bin/env python3
"""Instructions per round trip, by thread: a repeatable measure of SkyNet's own cost.

    python3 bench/instructions.py [--small N] [--large N] [--top K] [--no-baseline]

Runs `skynet bench latency --in-process --idle-spin 0` (no polling loops between messages, whose
instructions would vary with timing; the release build, `make release`: its runtime is linked
statically, which valgrind needs) under `valgrind --tool=callgrind` twice, with N and M round trips,
and prints the instructions each thread executed per round trip: (M-run minus N-run) / (M - N), so
start-up, warm-up and shutdown cancel out. They cancel only in part: the runtime's one-time lookups
(a conformance, a generic type's metadata, 0.1-0.5 M instructions each) and start-up or shutdown
events (a message parked while a peer connects) land in one run of the pair and not the other, and
so does what a job does once a second into it (the coordinator asks the broker's STATUS, in JSON,
for kinds no worker serves): with 200 and 1,200 round trips a total moved by ~1,000 from run to
run. By default both runs are long enough to pass that second under valgrind (2,500 and 7,500
round trips, ~15 s in all), and repeat runs agree within ~300 (~0.5%). Threads: the cluster's reactor (the broker and the worker share it in-process), the
coordinator's reactor, libzmq's I/O threads and the rest. With --top K it
also prints the K functions that cost the most instructions of their own per round trip on the
cluster's and the coordinator's reactor. The C baseline (`make baseline`: broker, worker and client
as three processes) is counted the same way, each process under callgrind, unless --no-baseline.

Instruction counts depend far less than timings on what else the machine is doing (this VM has no
hardware counters, and timings on it drift from run to run): on an idle machine repeat runs agree
within ~1.5%, under load within a few % (how many reactor turns carry the same messages depends on
timing), so a change to a hot path shows up as a number that moves mostly when the code does. They
are not time: a cache miss costs no more than an add here. Under valgrind everything runs ~50x
slower on one thread, so the workload is the sequential latency one, whose work per round trip
depends least on timing.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKYNET = os.environ.get("SKYNET_BIN") or os.path.join(ROOT, ".build", "release", "skynet")
BASELINE = os.path.join(ROOT, ".build", "baseline")
ENTRY = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)  (.*)")


def without_debug_info(binary, directory):
    """A copy of `binary` without its DWARF (symbols kept): valgrind 3.x gives up on the debug info of
    the build that links swift-subprocess ("Possibly corrupted debuginfo file"), and callgrind needs
    only the symbol table to name functions."""
    copy = os.path.join(directory, "skynet-nodebug")
    subprocess.run(["objcopy", "--strip-debug", binary, copy], check=True)
    return copy


def run(binary, round_trips, directory, client="chain"):
    """Runs the workload under callgrind; returns the paths of its threads' files."""
    binary = without_debug_info(binary, directory)
    prefix = os.path.join(directory, f"rt{round_trips}.out")
    command = [
        "valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}",
        binary, "bench", "latency", "--tasks", str(round_trips), "--in-process", "--idle-spin", "0", "--json",
        "--client", client,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(command[-11:])} under valgrind failed: {done.stderr.strip()[-400:]}")
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(f"rt{round_trips}.out-"))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_binary(path):
    """Ends the script with one line unless `path` is an executable file (a directory or a missing
    file got as far as `objcopy`, and a traceback)."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.exit(f"error: {path} is not an executable file; run `make release` first, or pass the skynet "
                 "binary with --skynet")


def sigint_default():
    """For `Popen(preexec_fn=...)`: SIGINT back to its default in a server this script stops with
    SIGINT. A script started in the background by a non-interactive shell (`... &`) inherits SIGINT
    ignored, and so would its servers: they never stopped, and their counts were lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_beside(servers, command, what, timeout=1800):
    """Runs `command` (a client) to its end while every one of `servers` ([(name, Popen)]) keeps
    running; returns its `CompletedProcess`. Ends the script with a one-line error when a server
    exits first: the C broker exits at once when it cannot bind its port (taken between
    ``free_port()`` and its start), and its client then waited for the timeout, half an hour."""
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = client.communicate(timeout=0.5)
            return subprocess.CompletedProcess(command, client.returncode, out, err)
        except subprocess.TimeoutExpired:
            pass
        gone = [(name, server.returncode) for name, server in servers if server.poll() is not None]
        late = time.monotonic() > deadline
        if gone or late:
            client.kill()
            client.communicate()
            if gone:
                name, status = gone[0]
                sys.exit(f"error: the {name} exited (status {status}) before {what} was done; run again "
                         "(a port it needed may have been taken)")
            sys.exit(f"error: {what} took more than {timeout} s under valgrind")


def run_baseline(round_trips, directory):
    """The C baseline's three processes under callgrind; returns [(process, thread file)]."""
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"

    def grind(name, *args):
        prefix = os.path.join(directory, f"c{round_trips}-{name}.out")
        return ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}",
                os.path.join(BASELINE, name), *args]

    servers = [subprocess.Popen(grind("broker", front, back), stderr=subprocess.DEVNULL, preexec_fn=sigint_default)]
    try:
        time.sleep(1.0)
        servers.append(subprocess.Popen(grind("worker", back, "4"), stderr=subprocess.DEVNULL, preexec_fn=sigint_default))
        time.sleep(1.0)
        done = run_beside([("C broker", servers[0]), ("C worker", servers[1])],
                          grind("client", front, "latency", str(round_trips)), "the C client")
        if done.returncode != 0:
            sys.exit(f"error: the C client under valgrind failed: {done.stderr.strip()[-400:]}")
    finally:
        # SIGINT ends them (valgrind writes its counts on the way out); SIGKILL if that did not.
        for server in reversed(servers):
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    found = []
    for name in sorted(os.listdir(directory)):
        match = re.match(rf"c{round_trips}-(\w+)\.out-\d+$", name)
        if match:
            found.append((match.group(1), os.path.join(directory, name)))
    # A process killed before valgrind wrote its counts (a loaded machine: it took more than 10 s to
    # stop) would leave the C total short and the ratio wrong.
    missing = {"broker", "worker", "client"} - {process for process, _ in found}
    if missing:
        sys.exit(f"error: no callgrind counts from the C {', '.join(sorted(missing))} (it did not stop in time); "
                 "run again on a quieter machine")
    return found


def functions(path, inclusive):
    """{function: instructions} from callgrind_annotate's summary of one thread."""
    args = ["callgrind_annotate", "--threshold=100"] + (["--inclusive=yes"] if inclusive else []) + [path]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout  # (its stderr: perl noise)
    found, in_summary = {}, False
    for line in out.splitlines():
        if "file:function" in line:
            in_summary = True
            continue
        if in_summary and line.startswith("----"):
            if found:
                break
            continue
        match = ENTRY.match(line) if in_summary else None
        if match and "PROGRAM TOTALS" not in match.group(2):
            name = re.sub(r" \[/.*", "", match.group(2)).split(":", 1)[-1]
            found[name] = found.get(name, 0) + int(match.group(1).replace(",", ""))
    return found, out


def role(inclusive, text):
    names = list(inclusive)
    count = lambda marker: sum(marker in name for name in names)  # noqa: E731
    reactor = count("6ZeroMQ7ReactorC4loop") > 0
    broker, coordinator = count("6SkyNet6BrokerC"), count("6SkyNet11CoordinatorC")
    if reactor and broker > coordinator:
        return "cluster reactor (broker + worker)"
    if reactor and coordinator > broker:
        return "coordinator reactor"
    if "start_thread" in text and "_dispatch_worker_thread" not in text and "libzmq.so" in text:
        return "libzmq I/O threads"
    return "other threads (the bench client's tasks, start-up)"


def demangle(names):
    done = subprocess.run(["swift", "demangle", "--simplified", "--compact"], input="\n".join(names),
                          capture_output=True, text=True)
    lines = done.stdout.splitlines()
    return lines if len(lines) == len(names) else names


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=2500, help="round trips of the first run (default 2500)")
    parser.add_argument("--large", type=int, default=7500, help="round trips of the second run (default 7500)")
    parser.add_argument("--top", type=int, default=0, help="also print the top K functions of each reactor")
    parser.add_argument("--skynet", default=SKYNET, help="the skynet binary (default: the release build)")
    parser.add_argument("--no-baseline", action="store_true", help="count SkyNet only, not the C baseline")
    parser.add_argument("--client", choices=("chain", "run"), default="chain",
                        help="how the client waits for each result: chain (Coordinator.runChain, the default) "
                             "or run (a loop of await Coordinator.run)")
    options = parser.parse_args()
    if options.small < 1:
        sys.exit("error: --small must be at least 1")
    if options.large <= options.small:
        sys.exit("error: --large must be more than --small")
    check_binary(options.skynet)
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"error: {tool} is missing (apt-get install -y valgrind)")
    if not options.no_baseline and not os.path.exists(os.path.join(BASELINE, "client")):
        sys.exit("error: no C baseline; run `make baseline` first (or pass --no-baseline)")
    with tempfile.TemporaryDirectory(prefix="skynet-instructions-") as directory:
        totals, selves, baseline = {}, {}, {}
        for count in (options.small, options.large):
            for path in run(options.skynet, count, directory, options.client):
                inclusive, text = functions(path, inclusive=True)
                who = role(inclusive, text)
                own, _ = functions(path, inclusive=False)
                totals.setdefault(who, {}).setdefault(count, 0)
                totals[who][count] += sum(own.values())
                bucket = selves.setdefault(who, {}).setdefault(count, {})
                for name, value in own.items():
                    bucket[name] = bucket.get(name, 0) + value
            if not options.no_baseline:
                for process, path in run_baseline(count, directory):
                    inclusive, text = functions(path, inclusive=True)
                    who = f"C {process}: " + ("main loop" if "main" in inclusive else "libzmq I/O threads")
                    own, _ = functions(path, inclusive=False)
                    baseline.setdefault(who, {}).setdefault(count, 0)
                    baseline[who][count] += sum(own.values())
    span = options.large - options.small
    print(f"instructions per round trip ({options.large} - {options.small} round trips, in-process, "
          f"--client {options.client}, callgrind)")
    grand = 0
    for who in sorted(totals):
        per = (totals[who].get(options.large, 0) - totals[who].get(options.small, 0)) / span
        grand += per
        print(f"  {who:50} {per:10,.0f}")
    print(f"  {'total':50} {grand:10,.0f}")
    if baseline:
        c_grand = 0
        print("the C baseline, the same way (three processes)")
        for who in sorted(baseline):
            per = (baseline[who].get(options.large, 0) - baseline[who].get(options.small, 0)) / span
            c_grand += per
            print(f"  {who:50} {per:10,.0f}")
        print(f"  {'total':50} {c_grand:10,.0f}")
        print(f"SkyNet/C: {grand / c_grand:.2f}x the instructions per round trip")
    for who in sorted(selves):
        if options.top <= 0 or "reactor" not in who:
            continue
        large, small = selves[who].get(options.large, {}), selves[who].get(options.small, {})
        per = {name: (large.get(name, 0) - small.get(name, 0)) / span for name in set(large) | set(small)}
        top = sorted(per.items(), key=lambda item: -item[1])[: options.top]
        print(f"\n{who}: top {options.top} functions by their own instructions per round trip")
        for (name, value), pretty in zip(top, demangle([name for name, _ in top])):
            print(f"  {value:8,.0f}  {pretty[:150]}")


if __name__ == "__main__":
    main()
