"""A network of its own for a worker host: a Linux network namespace with only a loopback,
where the services the host's settings name on the machine's loopback (Temporal, PostgreSQL,
the model server: every ``127.0.0.1:PORT`` or ``localhost:PORT`` in its environment) are
carried in by relays (tests/netrelay.py) and nothing else is reachable: not the other
hosts, not the inbox, not a store the settings do not name. Needs root and ``ip``
(iproute2); elsewhere hosts share the machine's network and ``unavailable()`` says why."""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

RELAY = Path(__file__).with_name("netrelay.py")
LOOPBACK_PORT = re.compile(r"(?:127\.0\.0\.1|localhost):(\d{2,5})\b")
_count = itertools.count()
_open: list[Network] = []


@cache
def unavailable() -> str | None:
    """Why hosts cannot have networks of their own here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2) to make network namespaces"
    probe = f"tower-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` refused: {made.stderr.strip()}"
    try:  # a container may allow the namespace but not what `exec` mounts in it
        for step in (["ip", "-n", probe, "link", "set", "lo", "up"],
                     ["ip", "netns", "exec", probe, sys.executable, "-c", "pass"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                return f"`{' '.join(step[:3])}` refused: {done.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


def loopback_ports(env: Mapping[str, str]) -> list[int]:
    """The machine-loopback ports ``env``'s settings name."""
    return sorted({int(p) for value in env.values() for p in LOOPBACK_PORT.findall(value)})


class Network:
    """One host's namespace and its two relays; ``close`` (or the end of the tests) removes
    them."""

    def __init__(self, host: str, ports: Iterable[int]) -> None:
        self.name = f"tower-{os.getpid()}-{next(_count)}-{host}"[:40]
        self.ports = list(ports)
        # Unix socket paths are short (108 bytes): not under pytest's long tmp paths.
        self.dir = Path(tempfile.mkdtemp(prefix="tnet-"))
        self.relays: list[subprocess.Popen[bytes]] = []
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        _open.append(self)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True)
        self._relay([sys.executable, str(RELAY), "outside", str(self.dir)])
        self._relay(self.wrap([sys.executable, str(RELAY), "inside", str(self.dir)]))

    def _relay(self, argv: list[str]) -> None:
        relay = subprocess.Popen([*argv, *map(str, self.ports)], stdout=subprocess.PIPE)
        self.relays.append(relay)
        assert relay.stdout is not None
        line = relay.stdout.readline()
        assert line.strip() == b"relaying", f"the relay {argv[-1]} did not start: {line!r}"

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this network (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def reaches(self, port: int) -> bool:
        """Whether a process in this network can open ``127.0.0.1:port``."""
        probe = ("import socket,sys\ntry: socket.create_connection(('127.0.0.1', "
                 f"{port}), timeout=3).close()\nexcept OSError: sys.exit(1)")
        return subprocess.run(self.wrap([sys.executable, "-c", probe])).returncode == 0

    def close(self) -> None:
        for relay in self.relays:
            relay.kill()
            relay.wait(timeout=10)
        self.relays.clear()
        subprocess.run(["ip", "netns", "del", self.name], check=False,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in _open:
            _open.remove(self)


@atexit.register
def _close_all() -> None:
    for network in list(_open):
        network.close()
