#!/usr/bin/env python3
"""The Kubernetes manifests, validated offline (no cluster here), and KEDA's query checked against a
real broker.

1. `kubectl kustomize` renders each overlay (deploy/kubernetes/overlays/*).
2. `kubernetes-validate --strict` checks every core object against the Kubernetes schemas (an
   unknown field fails); `check-jsonschema` checks the ScaledObject against the KEDA schema kept in
   deploy/kubernetes/schema.
3. SkyNet's own rules: every skynet container's flags exist in `skynet <command> --help` (the
   binary's own argument parser); the workers' grace period covers --drain-timeout; the scaler
   targets the worker Deployment with threshold = --slots (+ --prefetch); secrets are mounted
   private; the scrape annotations name the --http port.
4. A real broker (this build, --http) with queued and running tasks is scraped; `promtool check
   metrics` accepts the scrape, and `promtool test rules` evaluates the ScaledObject's query over it:
   it must equal queued + leased from the broker's /api/status.

  python3 Tests/Fleet/kubernetes_test.py [--skynet PATH]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBERNETES = os.path.join(ROOT, "deploy", "kubernetes")


def fail(message):
    print(f"kubernetes test: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def step(text):
    print(f"kubernetes test: {text}", flush=True)


def run(*argv, stdin=None):
    result = subprocess.run(argv, capture_output=True, text=True, input=stdin, timeout=120)
    if result.returncode != 0:
        fail(f"{' '.join(argv)} exited {result.returncode}: {(result.stderr + result.stdout).strip()[-1500:]}")
    return result.stdout


def tool(name, hint):
    if not shutil.which(name):
        fail(f"{name} is missing: {hint}")


def duration_seconds(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not match:
        fail(f"not a duration: {text}")
    return float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def flag_values(args):
    """--name=value and --name value pairs of a container's args."""
    values, index = {}, 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg.partition("=")
            values[name] = value
        elif arg.startswith("--") and index + 1 < len(args) and not args[index + 1].startswith("--"):
            values[arg] = args[index + 1]
            index += 1
        elif arg.startswith("--"):
            values[arg] = True
        index += 1
    return values


def known_flags(skynet, command):
    info = json.loads(run(skynet, command, "--experimental-dump-help"))
    names = set()
    for argument in info["command"].get("arguments", []):
        for name in argument.get("names", []):
            if name["kind"] == "long":
                names.add("--" + name["name"])
    return names


def check_overlay(overlay, skynet, schema):
    rendered = run("kubectl", "kustomize", os.path.join(KUBERNETES, "overlays", overlay))
    documents = [document for document in yaml.safe_load_all(rendered) if document]
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in documents)
    step(f"{overlay}: kubectl kustomize → {', '.join(kinds)}")
    with tempfile.TemporaryDirectory() as directory:
        core = os.path.join(directory, "core.yaml")
        with open(core, "w") as file:
            yaml.safe_dump_all([d for d in documents if d["kind"] != "ScaledObject"], file)
        output = run("kubernetes-validate", "--strict", "--quiet", core)
        if output.strip():
            fail(f"{overlay}: kubernetes-validate --strict: {output.strip()}")
        scaled = [d for d in documents if d["kind"] == "ScaledObject"]
        if len(scaled) != 1:
            fail(f"{overlay}: {len(scaled)} ScaledObjects, expected 1")
        custom = os.path.join(directory, "scaledobject.json")
        with open(custom, "w") as file:
            json.dump(scaled[0], file)
        run("check-jsonschema", "--schemafile", schema, custom)
    step(f"{overlay}: kubernetes-validate --strict and check-jsonschema (KEDA) passed")

    by_name = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    for document in documents:
        template = document.get("spec", {}).get("template", {}).get("spec")
        if not template:
            continue
        for container in template.get("initContainers", []) + template.get("containers", []):
            if not container["image"].startswith("skynet") or "args" not in container:
                continue
            command, *args = container["args"]
            flags = {arg.split("=")[0] for arg in args if arg.startswith("--")}
            unknown = flags - known_flags(skynet, command)
            if unknown:
                fail(f"{overlay}: {document['metadata']['name']} gives `skynet {command}` unknown flags {sorted(unknown)}")
        for volume in template.get("volumes", []):
            secret = volume.get("secret")
            # Allowlists hold public keys; every other secret holds a secret key.
            if secret and not secret["secretName"].startswith("skynet-allow-") and secret.get("defaultMode", 0o644) & 0o007:
                fail(f"{overlay}: secret volume {volume['name']} ({secret['secretName']}) is readable by others")
    worker = by_name[("Deployment", "skynet-worker")]
    pod = worker["spec"]["template"]["spec"]
    flags = flag_values(pod["containers"][0]["args"][1:])
    drain = duration_seconds(flags.get("--drain-timeout", "30s"))
    if pod.get("terminationGracePeriodSeconds", 30) <= drain:
        fail(f"{overlay}: the workers' grace period ({pod.get('terminationGracePeriodSeconds', 30)} s) does not cover --drain-timeout ({drain:g} s)")
    credit = int(flags.get("--slots", 4)) + int(flags.get("--prefetch", 0))
    scaler = by_name[("ScaledObject", "skynet-worker")]
    if scaler["spec"]["scaleTargetRef"]["name"] != "skynet-worker":
        fail(f"{overlay}: the ScaledObject does not target the worker Deployment")
    trigger = scaler["spec"]["triggers"][0]["metadata"]
    if float(trigger["threshold"]) != credit:
        fail(f"{overlay}: the scaler's threshold {trigger['threshold']} is not the workers' slots + prefetch ({credit})")
    down = scaler["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    if down.get("stabilizationWindowSeconds", 0) < 300:
        fail(f"{overlay}: scale-down is not slow (stabilization {down.get('stabilizationWindowSeconds', 0)} s)")
    broker = by_name[("StatefulSet", "skynet-broker")]
    annotations = broker["spec"]["template"]["metadata"].get("annotations", {})
    broker_flags = flag_values(broker["spec"]["template"]["spec"]["containers"][0]["args"][1:])
    if annotations.get("prometheus.io/scrape") != "true" or not broker_flags.get("--http", "").endswith(":" + annotations.get("prometheus.io/port", "?")):
        fail(f"{overlay}: the scrape annotations do not name the broker's --http port")
    return trigger["query"]


def scrape_and_query(skynet, query):
    """A broker with tasks queued and running, scraped; promtool evaluates KEDA's query over it."""
    token = "fleet-test-token"
    logs = tempfile.mkdtemp(prefix="skynet-k8s-")
    processes = []

    def start(name, *argv):
        log = open(os.path.join(logs, f"{name}.log"), "w")
        process = subprocess.Popen([skynet, *argv], stdout=subprocess.PIPE if name == "broker" else log,
                                   stderr=log, stdin=subprocess.DEVNULL, text=True)
        processes.append(process)
        return process

    try:
        broker = start("broker", "broker", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*",
                       "--http", "127.0.0.1:0", "--http-token", token)
        try:
            listening = json.loads(broker.stdout.readline())["listening"]
            http = json.loads(broker.stdout.readline())["http"]
        except (ValueError, KeyError):
            broker.wait(timeout=5)
            fail(f"the broker did not start: {open(os.path.join(logs, 'broker.log')).read()[-1500:]}")
        start("worker", "worker", "--broker", listening["backend"], "--slots", "2")
        start("submit", "submit", "--broker", listening["frontend"], "--sectors", "10", "--work", "30s",
              "--no-progress")

        def get(path):
            request = urllib.request.Request(http.rstrip("/") + path, headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.read().decode()

        deadline = time.time() + 20
        while True:
            status = json.loads(get("/api/status"))["status"]
            if status.get("leased") == 2 and status.get("queued") == 8:
                break
            if time.time() > deadline:
                fail(f"the broker never had 8 queued and 2 leased: {json.dumps(status)[:600]}")
            time.sleep(0.3)
        time.sleep(0.6)  # the HTTP endpoint's figures are refreshed every 250 ms
        scrape = get("/metrics")
        status = json.loads(get("/api/status"))["status"]
    finally:
        for process in processes:
            process.send_signal(signal.SIGKILL)
            process.wait()
        shutil.rmtree(logs, ignore_errors=True)
    expected = status["queued"] + status["leased"]
    run("promtool", "check", "metrics", stdin=scrape)
    series = []
    for line in scrape.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        if "{" in name_labels:
            name, labels = name_labels.split("{", 1)
            labels = labels.rstrip("}")
            labels = (labels + "," if labels else "") + 'instance="broker-0:8787",job="skynet-broker"'
        else:
            name, labels = name_labels, 'instance="broker-0:8787",job="skynet-broker"'
        series.append({"series": f"{name}{{{labels}}}", "values": value})
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [{"expr": query, "eval_time": "0m", "exp_samples": [{"labels": "{}", "value": expected}]}],
        }],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as file:
        yaml.safe_dump(tests, file)
    try:
        run("promtool", "test", "rules", file.name)
    finally:
        os.unlink(file.name)
    step(f"promtool: the scrape passes `check metrics`; KEDA's query over it = {expected} (queued {status['queued']} + leased {status['leased']})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skynet", default=os.path.join(ROOT, ".build", "release", "skynet"))
    args = parser.parse_args()
    tool("kubectl", "the kubectl client (its kustomize renders the overlays)")
    tool("kubernetes-validate", "python3 -m pip install kubernetes-validate")
    tool("check-jsonschema", "python3 -m pip install check-jsonschema")
    tool("promtool", "apt-get install -y prometheus")
    if not os.access(args.skynet, os.X_OK):
        fail(f"no skynet binary at {args.skynet}: run `make release` (or pass --skynet)")
    schema = os.path.join(KUBERNETES, "schema", "keda-scaledobject.json")
    queries = {check_overlay(overlay, args.skynet, schema) for overlay in sorted(os.listdir(os.path.join(KUBERNETES, "overlays")))}
    for query in sorted(queries):
        scrape_and_query(args.skynet, query)
    versions = ", ".join(
        subprocess.run(argv, capture_output=True, text=True).stdout.strip().splitlines()[0]
        for argv in (["kubectl", "version", "--client"], ["kubernetes-validate", "--version"],
                     ["check-jsonschema", "--version"], ["promtool", "--version"]))
    print(f"kubernetes test: ok ({versions})")


if __name__ == "__main__":
    main()
