#!/usr/bin/env python3
"""Times one round trip hop by hop from the kernel's view of each process's libzmq I/O thread.

Record while a latency workload runs (root, perf installed), then give the three process ids:

    perf record -e syscalls:sys_enter_sendto,syscalls:sys_exit_recvfrom -a -o hops.data -- sleep 2
    perf script -F comm,pid,tid,cpu,time,event,trace -i hops.data > hops.txt
    python3 bench/hops.py hops.txt CLIENT_PID BROKER_PID WORKER_PID

It finds each round trip as the sequence client send, broker receive, broker send, worker receive,
worker send, broker receive, broker send, client receive, and prints the median time of each step:
the wires (TCP between I/O threads) and what each process does in between (wake its reactor, handle
the message, hand the answer back to its I/O thread). Works for `skynet bench latency` and for the C
baseline (`.build/baseline/client ... latency N`) alike.
"""
import re
import statistics
import sys

PATTERN = [
    ("C", "sys_enter_sendto"), ("B", "sys_exit_recvfrom"), ("B", "sys_enter_sendto"),
    ("W", "sys_exit_recvfrom"), ("W", "sys_enter_sendto"), ("B", "sys_exit_recvfrom"),
    ("B", "sys_enter_sendto"), ("C", "sys_exit_recvfrom"),
]
LABELS = [
    "client -> broker (wire)", "broker: SUBMIT in -> TASK out", "broker -> worker (wire)",
    "worker: TASK in -> RESULT out", "worker -> broker (wire)", "broker: RESULT in -> RESULT out",
    "broker -> client (wire)",
]
LINE = re.compile(r"\s*\S.*?\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+syscalls:(sys_enter_sendto|sys_exit_recvfrom):\s+(.*)")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    roles = dict(zip(map(int, sys.argv[2:5]), "CBW"))
    events = []
    with open(sys.argv[1]) as trace:
        for line in trace:
            match = LINE.match(line)
            if not match:
                continue
            pid, _, stamp, kind, rest = match.groups()
            if int(pid) not in roles:
                continue
            if kind == "sys_exit_recvfrom":
                value = int(rest.split()[-1], 0)
                if value <= 0 or value >= 2**63:  # EAGAIN and other failures
                    continue
            events.append((float(stamp) * 1e6, roles[int(pid)], kind))
    steps = [[] for _ in LABELS]
    totals = []
    turnarounds = []  # the client's receive of one round trip to its send of the next
    last_end = None
    i = 0
    while i + len(PATTERN) <= len(events):
        if all(events[i + j][1:] == PATTERN[j] for j in range(len(PATTERN))):
            stamps = [events[i + j][0] for j in range(len(PATTERN))]
            for j in range(1, len(PATTERN)):
                steps[j - 1].append(stamps[j] - stamps[j - 1])
            totals.append(stamps[-1] - stamps[0])
            if last_end is not None and last_end[0] == i:
                turnarounds.append(stamps[0] - last_end[1])
            last_end = (i + len(PATTERN), stamps[-1])
            i += len(PATTERN)
        else:
            i += 1
    if not totals:
        sys.exit("no complete round trip found: check the process ids (client, broker, worker)")
    print(f"{len(totals)} round trips")
    for label, values in zip(LABELS, steps):
        print(f"{label:34s} {statistics.median(values):7.1f} us")
    print(f"{'client send -> client receive':34s} {statistics.median(totals):7.1f} us")
    if turnarounds:
        print(f"{'client: RESULT in -> next SUBMIT out':34s} {statistics.median(turnarounds):7.1f} us")


if __name__ == "__main__":
    main()
