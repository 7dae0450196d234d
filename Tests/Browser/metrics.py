#!/usr/bin/env python3
"""Reads a broker's /metrics (URL, optional bearer TOKEN), checks it with `promtool check metrics`
when promtool is installed, parses it with prometheus_client's parser, and prints one JSON object:
{"samples": {"name{label=value,...}": value}, "promtool": "ok" | "missing" | its complaint}."""
import json
import shutil
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    url = sys.argv[1]
    request = urllib.request.Request(url)
    if len(sys.argv) > 2:
        request.add_header("Authorization", f"Bearer {sys.argv[2]}")
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    checked = "missing"
    if shutil.which("promtool"):
        done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        checked = "ok" if done.returncode == 0 else (done.stdout + done.stderr).strip()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    print(json.dumps({"samples": samples, "promtool": checked}))


if __name__ == "__main__":
    main()
