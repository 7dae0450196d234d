#!/usr/bin/env python3
"""`make bench`: SkyNet against the hand-written C baseline, side by side on this machine.

Runs the baseline and `skynet bench` alternately (A B A B A B, --rounds rounds) for throughput with
1 and 2 workers and for latency, then SkyNet's other workloads, and prints a table of medians
(min-max), the baseline's medians and the SkyNet/baseline ratios next to the targets of issue 4.
Deep credit (issue 28): 1 and 2 workers x 64 slots through the command line (`skynet broker`,
`skynet worker --slots 64`, `skynet submit --sectors N --work 0`) against the C relay with 64
credits, and 20,000 tasks of 1 ms on 2 workers x 16 slots (efficiency = ideal / wall).
Each round also runs two yardsticks for throughput with 1 worker x 4 slots: `batched`
(bench/baseline/batched.c), a C relay with SkyNet's batched design and C's per-message cost, and
`ceiling` (bench/baseline/ceiling.c), the fastest credit cycle two bare C processes run with 4
credits, the bound on any relay's throughput here.
Absolute numbers drift on a shared machine; ratios measured side by side are what count.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(ROOT, ".build", "baseline")
SKYNET = os.path.join(ROOT, ".build", "release", "skynet")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_json(command, timeout):
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode not in (0, 1) or not lines:
        raise RuntimeError(f"{' '.join(command)} failed ({out.returncode}): {out.stderr[-800:]}")
    return json.loads(lines[-1])


def on_cpu(cpu, command):
    """`command` pinned to one CPU with taskset (--pin), or as it is when `cpu` is None."""
    return command if cpu is None else ["taskset", "-c", str(cpu), *command]


def pin_cpus():
    """The two CPUs --pin uses: the first two this process may run on (relay, client)."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[0], cpus[1]


def baseline(workload, tasks, workers, credit=4, pin=False):
    """The C relay; with `pin`, its broker and workers on one CPU and its client on another."""
    relay, client = pin_cpus() if pin else (None, None)
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(on_cpu(relay, [os.path.join(BASELINE, "broker"), front, back]))]
    try:
        time.sleep(0.1)
        for _ in range(workers):
            procs.append(subprocess.Popen(on_cpu(relay, [os.path.join(BASELINE, "worker"), back, str(credit)])))
        time.sleep(0.2)
        return run_json(on_cpu(client, [os.path.join(BASELINE, "client"), front, workload, str(tasks)]), timeout=120)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def cli_job(tasks, workers, slots, work="0", worker_flags=(), pin=False):
    """SkyNet through the command line, as a user runs it (issue 28): `skynet broker`, `workers` x
    `skynet worker --slots N` and `skynet submit --sectors TASKS --work WORK` (each result printed as a
    JSON line, read here and dropped); returns the submit's summary (tasks_per_s, wall_s). With `pin`,
    the broker and workers run on one CPU and `skynet submit` on another (``pin_cpus``)."""
    relay, client = pin_cpus() if pin else (None, None)
    front, back = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(on_cpu(relay, [SKYNET, "broker", "--frontend", front, "--backend", back]), **quiet)]
    try:
        time.sleep(0.3)
        for _ in range(workers):
            procs.append(subprocess.Popen(
                on_cpu(relay, [SKYNET, "worker", "--broker", back, "--slots", str(slots), *worker_flags]), **quiet))
        time.sleep(0.5)
        out = subprocess.run(on_cpu(client, [SKYNET, "submit", "--broker", front, "--sectors", str(tasks), "--work",
                                             work, "--no-progress", "--json"]),
                             capture_output=True, text=True, timeout=300)
        summary = json.loads(out.stdout.strip().splitlines()[-1])["summary"]
        if out.returncode != 0 or summary["completed"] != tasks:
            raise RuntimeError(f"skynet submit: {summary['completed']} of {tasks} completed: {out.stderr[-400:]}")
        return summary
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def skynet(workload, *args, timeout=600):
    return run_json([SKYNET, "bench", workload, "--json", *args], timeout=timeout)


def spread(values):
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def spread3(values):
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="only the side-by-side workloads")
    parser.add_argument("--deep-tasks", type=int, default=200000,
                        help="tasks for the deep-credit rows (64 credits a worker; 0 skips them)")
    parser.add_argument("--pin", action="store_true",
                        help="also run deep credit with 1 worker pinned: broker and worker on one CPU, the client on "
                             "another, for SkyNet and the C relay (a diagnostic: where the scheduler puts the processes "
                             "moves that row; see DESIGN.md §3)")
    options = parser.parse_args()
    if options.rounds < 1 or options.tasks < 1 or options.deep_tasks < 0:
        parser.error("--rounds and --tasks must be at least 1, --deep-tasks at least 0")
    if options.pin and options.deep_tasks == 0:
        parser.error("--pin pins the deep-credit row: it needs --deep-tasks above 0")
    if options.pin and len(os.sched_getaffinity(0)) < 2:
        sys.exit("error: --pin needs at least 2 CPUs to run on (this process may use "
                 f"{len(os.sched_getaffinity(0))}; see taskset)")

    results = {"skynet": {}, "baseline": {}}

    def add(side, key, value):
        results[side].setdefault(key, []).append(value)

    for round_ in range(1, options.rounds + 1):
        print(f"round {round_}/{options.rounds}", file=sys.stderr, flush=True)
        for workers in (1, 2):
            key = f"throughput_{workers}w"
            add("baseline", key, baseline("throughput", options.tasks, workers)["tasks_per_s"])
            add("skynet", key, skynet("throughput", "--tasks", str(options.tasks), "--workers", str(workers))["tasks_per_s"])
        ceiling = run_json([os.path.join(BASELINE, "ceiling"), f"tcp://127.0.0.1:{free_port()}",
                            str(options.tasks), "4", "4"], timeout=120)
        add("baseline", "ceiling", ceiling["tasks_per_s"])
        batched = run_json([os.path.join(BASELINE, "batched"), f"tcp://127.0.0.1:{free_port()}",
                            str(options.tasks), "4"], timeout=120)
        add("baseline", "batched", batched["tasks_per_s"])
        b = baseline("latency", 2000, 1)
        s = skynet("latency", "--tasks", "2000")
        add("baseline", "latency_p50", b["p50_us"])
        add("baseline", "latency_p99", b["p99_us"])
        add("skynet", "latency_p50", s["p50_us"])
        add("skynet", "latency_p99", s["p99_us"])
        # The same round trips through a loop of `await Coordinator.run` (the default client is
        # `Coordinator.runChain`).
        r = skynet("latency", "--tasks", "2000", "--client", "run")
        add("skynet", "run_latency_p50", r["p50_us"])
        add("skynet", "run_latency_p99", r["p99_us"])
        # CURVE's cost: the same workloads with --curve, right after the plain ones (issue 17).
        add("skynet", "curve_throughput", skynet("throughput", "--tasks", str(options.tasks), "--curve")["tasks_per_s"])
        c = skynet("latency", "--tasks", "2000", "--curve")
        add("skynet", "curve_latency_p50", c["p50_us"])
        # The HTTP endpoint's cost (issue 19): the broker serving it, read every 250 ms.
        add("skynet", "http_throughput", skynet("throughput", "--tasks", str(options.tasks), "--http")["tasks_per_s"])
        add("skynet", "http_latency_p50", skynet("latency", "--tasks", "2000", "--http")["p50_us"])
        # The typed API's cost (issue 18): typed no-op (Int -> Int) against the raw-bytes no-op.
        add("skynet", "typed_vs_raw", skynet("typed", "--tasks", str(options.tasks))["typed_vs_raw"])
        # Deep credit (issue 28): 64 slots a worker, no-op tasks through `skynet submit`, against the
        # C relay with 64 credits, alternated in the same round. After the 4-slot, latency, CURVE,
        # HTTP and typed rows: right after these heavy jobs, latency read higher for seconds (the
        # CURVE p50 of the old and the new binary alike, 218-228 against 177-184 µs, DESIGN.md §3).
        for workers in (1, 2) if options.deep_tasks else ():
            key = f"deep_{workers}w"
            add("baseline", key, baseline("throughput", options.deep_tasks, workers, credit=64)["tasks_per_s"])
            add("skynet", key, cli_job(options.deep_tasks, workers, 64)["tasks_per_s"])
        if options.pin and options.deep_tasks:
            add("baseline", "deep_1w_pinned", baseline("throughput", options.deep_tasks, 1, credit=64, pin=True)["tasks_per_s"])
            add("skynet", "deep_1w_pinned", cli_job(options.deep_tasks, 1, 64, pin=True)["tasks_per_s"])
        if not options.quick:
            add("skynet", "fairness_small_job_s", skynet("fairness")["small_job_s"])
            add("skynet", "efficiency", skynet("efficiency")["efficiency"])
            # Fine-grained work (issue 28): 20,000 tasks of 1 ms on 2 workers x 16 slots.
            fine = cli_job(20000, 2, 16, work="1ms")
            add("skynet", "fine_efficiency", 20000 * 0.001 / 32 / fine["wall_s"])
            fine = cli_job(20000, 2, 16, work="1ms", worker_flags=("--prefetch", "16"))
            add("skynet", "fine_efficiency_prefetch", 20000 * 0.001 / 32 / fine["wall_s"])
            f = skynet("failures")
            add("skynet", "failures_completed", f["completed"])
            add("skynet", "failures_ratio", f["wall_ratio"])
            add("skynet", "failures_ratio_immediate", f["wall_ratio_without_backoff"])
            sc = skynet("scale")
            add("skynet", "scale_efficiency", sc["efficiency"])
            add("skynet", "scale_registered", sc["workers_registered"])
            m = skynet("memory")
            add("skynet", "memory_broker_mib", m["broker_rss_mib"])
            add("skynet", "memory_coordinator_mib", m["coordinator_rss_mib"])

    sk, bl = results["skynet"], results["baseline"]
    med = statistics.median
    rows = [("workload", "SkyNet median (min–max)", "C baseline median", "SkyNet/baseline", "target")]
    for workers in (1, 2):
        key = f"throughput_{workers}w"
        rows.append((f"throughput, {workers} worker{'s' if workers > 1 else ''} × 4 slots (tasks/s)",
                     spread(sk[key]), f"{med(bl[key]):,.0f}", f"{med(sk[key]) / med(bl[key]):.2f}×",
                     "≥ 1.0× (and ≥ 100,000/s)" if workers == 1 else "≥ 1.0×"))
    for workers in (1, 2):
        key = f"deep_{workers}w"
        if key in sk:
            rows.append((f"deep credit: {workers} worker{'s' if workers > 1 else ''} × 64 slots, "
                         f"{options.deep_tasks:,} no-op tasks via `skynet submit` (tasks/s)",
                         spread(sk[key]), f"{med(bl[key]):,.0f} (64 credits)",
                         f"{med(sk[key]) / med(bl[key]):.2f}×", "≥ 1.5× (issue 28)"))
    if "deep_1w_pinned" in sk:
        rows.append(("deep credit, 1 worker × 64, pinned: broker and worker on one CPU, the client on another (tasks/s)",
                     spread(sk["deep_1w_pinned"]), f"{med(bl['deep_1w_pinned']):,.0f} (64 credits)",
                     f"{med(sk['deep_1w_pinned']) / med(bl['deep_1w_pinned']):.2f}×", "diagnostic (--pin)"))
    rows.append(("batched C relay: SkyNet's design, 1 worker × 4 credits (tasks/s)", "",
                 spread(bl["batched"]), f"{med(sk['throughput_1w']) / med(bl['batched']):.2f}×",
                 "yardstick, no target"))
    rows.append(("ceiling: 2 C processes, 4 credits, 4 per message, polled (tasks/s)", "",
                 spread(bl["ceiling"]), f"{med(sk['throughput_1w']) / med(bl['ceiling']):.2f}×",
                 "bounds any relay with 4 credits"))
    rows.append(("latency p50, Coordinator.runChain (µs)", spread(sk["latency_p50"]), f"{med(bl['latency_p50']):,.0f}",
                 f"{med(sk['latency_p50']) / med(bl['latency_p50']):.2f}×", "≤ 1.5×"))
    rows.append(("latency p99, Coordinator.runChain (µs)", spread(sk["latency_p99"]), f"{med(bl['latency_p99']):,.0f}",
                 f"{med(sk['latency_p99']) / med(bl['latency_p99']):.2f}×", "≤ 2×"))
    rows.append(("latency p50 through a loop of run(_:), --client run (µs)", spread(sk["run_latency_p50"]),
                 f"{med(bl['latency_p50']):,.0f}", f"{med(sk['run_latency_p50']) / med(bl['latency_p50']):.2f}×",
                 "≤ 1.5×"))
    rows.append(("latency p99 through a loop of run(_:), --client run (µs)", spread(sk["run_latency_p99"]),
                 f"{med(bl['latency_p99']):,.0f}", f"{med(sk['run_latency_p99']) / med(bl['latency_p99']):.2f}×",
                 "≤ 2×"))
    rows.append(("throughput with --curve, 1 worker × 4 (tasks/s)", spread(sk["curve_throughput"]), "",
                 f"{med(sk['curve_throughput']) / med(sk['throughput_1w']):.2f}× plain", "≥ 0.8× plain"))
    rows.append(("latency p50 with --curve (µs)", spread(sk["curve_latency_p50"]), "",
                 f"{med(sk['curve_latency_p50']) / med(sk['latency_p50']):.2f}× plain", "≤ 1.3× plain"))
    rows.append(("throughput with --http (watched every 250 ms, 40 slow clients, garbage), 1 worker × 4 (tasks/s)", spread(sk["http_throughput"]),
                 "", f"{med(sk['http_throughput']) / med(sk['throughput_1w']):.2f}× plain", "≈ 1.0× plain"))
    rows.append(("latency p50 with --http (watched, slow clients, garbage) (µs)", spread(sk["http_latency_p50"]), "",
                 f"{med(sk['http_latency_p50']) / med(sk['latency_p50']):.2f}× plain", "≈ 1.0× plain"))
    rows.append(("typed no-op (Int → Int) / raw-bytes no-op, same run", spread3(sk["typed_vs_raw"]), "", "",
                 "≥ 0.9×"))
    if not options.quick:
        rows.append(("fairness: 10 tasks behind 10,000 of another coordinator (s)",
                     spread3(sk["fairness_small_job_s"]), "", "", "a few credit cycles"))
        rows.append(("efficiency (ideal/makespan)", spread3(sk["efficiency"]), "", "", "≥ 0.98"))
        rows.append(("fine-grained: 20,000 tasks of 1 ms, 2 workers × 16 slots, via `skynet submit` (ideal/wall)",
                     spread3(sk["fine_efficiency"]), "", "", "≥ 0.9 (issue 28)"))
        rows.append(("fine-grained, the same with `skynet worker --prefetch 16` (ideal/wall)",
                     spread3(sk["fine_efficiency_prefetch"]), "", "", "≥ 0.9 (issue 28)"))
        rows.append(("failures: completed of 1,000", spread(sk["failures_completed"]), "", "", "1,000"))
        rows.append(("failures: wall / wall without failures", spread3(sk["failures_ratio"]), "", "", "≤ 2"))
        rows.append(("failures: the same, retried without backoff", spread3(sk["failures_ratio_immediate"]),
                     "", "", ""))
        rows.append(("scale: workers registered of 100", spread(sk["scale_registered"]), "", "", "100"))
        rows.append(("scale: efficiency", spread3(sk["scale_efficiency"]), "", "", "≥ 0.90"))
        rows.append(("memory: broker RSS, 1 M queued (MiB)", spread(sk["memory_broker_mib"]), "", "", "≤ 256"))
        rows.append(("memory: coordinator RSS (MiB)", spread(sk["memory_coordinator_mib"]), "", "", "≤ 256"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for index, row in enumerate(rows):
        print("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |")
        if index == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    path = os.path.join(ROOT, ".build", "bench-results.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nall runs: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
