"""A private network of Linux network namespaces for tests: one "switch" namespace holding a
bridge, and one namespace per host plugged into it by a veth pair. Cutting a host unplugs its
cable (its bridge port goes down): the host and everything running in it are cut off from the
rest, and the rest from it, while every process keeps running and every TCP connection stays
open, as in a real partition. Nothing is created in the caller's namespace; the addresses live
only on the hosts' veths, with no route out.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

SUBNET = "10.213.0"  # /24; hosts get .11, .12, … in the order they are added
FIRST_HOST = 11
HOST_NAME_MAX = 6  # prefix (8) + host + "s" (the bridge port) within Linux's 15 characters
IP_TIMEOUT = 10.0  # one ``ip`` command


def unavailable_reason() -> str | None:
    """Why this process cannot make network namespaces (None: it can)."""
    if os.geteuid() != 0:
        return f"network namespaces need root (the effective uid is {os.geteuid()})"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = "ms" + secrets.token_hex(3) + "pr"
    added = _ip("netns", "add", probe, check=False)
    if added.returncode != 0:
        return f"ip netns add failed: {added.stderr.strip()}"
    deleted = _ip("netns", "del", probe, check=False)
    if deleted.returncode != 0:
        return f"ip netns del failed: {deleted.stderr.strip()}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done


@dataclass
class Network:
    """Hosts on one bridge, each in a namespace named ``prefix + host``.

    ``prefix`` is ``ms`` and 6 random hex digits, so that parallel test runs never share a
    namespace or an interface name.
    """

    prefix: str = field(default_factory=lambda: "ms" + secrets.token_hex(3))
    addresses: dict[str, str] = field(default_factory=dict)  # host -> its address
    _namespaces: list[str] = field(default_factory=list)

    @property
    def switch(self) -> str:
        """The namespace of the bridge."""
        return self.prefix + "sw"

    def namespace(self, host: str) -> str:
        return self.prefix + host

    def _port(self, host: str) -> str:
        """The host's bridge port: the switch end of its veth pair."""
        return self.prefix + host + "s"

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def start(self) -> None:
        """Make the switch: its namespace and the bridge."""
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def add_host(self, host: str) -> str:
        """A namespace for ``host``, plugged into the switch; returns its address."""
        if not host.isalnum() or len(host) > HOST_NAME_MAX:
            raise ValueError(f"host name {host!r}: 1 to {HOST_NAME_MAX} letters or digits")
        namespace = self.namespace(host)
        self._add_namespace(namespace)
        address = f"{SUBNET}.{FIRST_HOST + len(self.addresses)}"
        # Both ends are made in their namespaces at once: none ever shows in the caller's.
        _ip(
            "link",
            "add",
            namespace,
            "netns",
            namespace,
            "type",
            "veth",
            "peer",
            "name",
            self._port(host),
            "netns",
            self.switch,
        )
        _ip("-n", self.switch, "link", "set", self._port(host), "master", "br0", "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", namespace)
        _ip("-n", namespace, "link", "set", namespace, "up")
        self.addresses[host] = address
        return address

    def command(self, host: str, *argv: str) -> list[str]:
        """``argv`` run in ``host``'s namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def cut(self, host: str) -> None:
        """Unplug ``host``: no packet passes between it and the other hosts."""
        _ip("-n", self.switch, "link", "set", self._port(host), "down")

    def heal(self, host: str) -> None:
        """Plug ``host`` back in."""
        _ip("-n", self.switch, "link", "set", self._port(host), "up")

    def close(self) -> None:
        """Delete every namespace made (their veths and the bridge go with them). The
        processes running in them must be stopped first."""
        failures = []
        for name in reversed(self._namespaces):
            deleted = _ip("netns", "del", name, check=False)
            if deleted.returncode != 0:
                failures.append(f"{name}: {deleted.stderr.strip()}")
        self._namespaces.clear()
        if failures:
            raise RuntimeError(f"could not delete network namespaces: {failures}")
