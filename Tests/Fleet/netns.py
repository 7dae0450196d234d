"""Hosts on one LAN for the fleet tests: a network namespace per host, each joined by a veth link to
a bridge in a "switch" namespace (as Tests/IntegrationTests/Hosts.swift does for the Swift tests).
Needs root and iproute2; nothing touches the machine's own network namespace."""
import os
import subprocess


class Hosts:
    def __init__(self, names, subnet="10.78.0"):
        self.prefix = f"skf{os.getpid() % 100000}"
        self.addresses = {name: f"{subnet}.{index + 1}" for index, name in enumerate(names)}
        self.created = []
        switch = f"{self.prefix}-sw"
        try:
            self._add(switch)
            ip("-n", switch, "link", "add", "br0", "type", "bridge")
            ip("-n", switch, "link", "set", "br0", "up")
            for index, name in enumerate(names):
                namespace = self.namespace(name)
                self._add(namespace)
                port = f"p{index}"
                ip("link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", port, "netns", switch)
                ip("-n", switch, "link", "set", port, "master", "br0")
                ip("-n", switch, "link", "set", port, "up")
                ip("-n", namespace, "addr", "add", f"{self.addresses[name]}/24", "dev", "eth0")
                ip("-n", namespace, "link", "set", "eth0", "up")
        except Exception:
            self.remove()
            raise

    def namespace(self, name):
        return f"{self.prefix}-{name}"

    def launcher(self, name):
        return ["ip", "netns", "exec", self.namespace(name)]

    def _add(self, namespace):
        subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        ip("netns", "add", namespace)
        self.created.append(namespace)
        ip("-n", namespace, "link", "set", "lo", "up")

    def remove(self):
        for namespace in reversed(self.created):
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        self.created = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def ip(*arguments):
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(arguments)}: {result.stderr.strip()}")
