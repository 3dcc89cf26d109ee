"""Private network namespaces joined by veth pairs, for tests and benchmarks of the hardware path.

Every name starts with ``mcfemu-`` and a random suffix, so nothing outside what
this module created is touched, and ``Lab.close`` removes all of it (deleting a
namespace deletes the veth ends inside it). Needs root and iproute2.

    with Lab() as lab:
        a, b = lab.pair()                  # two namespaces, one veth between them
        lab.run(a, "python", "-m", "emu", "hw", "listen", "--iface", a.iface, ...)
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass

from .errors import HwError


@dataclass(frozen=True)
class End:
    """One end of a link: a namespace and the interface in it."""

    ns: str
    iface: str

    def cmd(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *argv]

    def emu(self, *argv: str) -> list[str]:
        return self.cmd(sys.executable, "-m", "emu", *argv)


def available() -> str | None:
    """Why namespaces cannot be made here (None if they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces and AF_PACKET are Linux only"
    if os.geteuid() != 0:
        return "needs root (ip netns add, veth pairs and raw sockets); CI runs as root"
    if shutil.which("ip") is None:
        return "needs iproute2 (the ip command)"
    return None


class Lab:
    """Namespaces, veth pairs and bridges made for one test; ``close`` removes them all."""

    def __init__(self, tag: str | None = None):
        self.tag = tag or secrets.token_hex(3)
        self.namespaces: list[str] = []
        self._n = 0

    def _ip(self, *argv: str) -> None:
        r = subprocess.run(["ip", *argv], capture_output=True, text=True)
        if r.returncode:
            raise HwError(f"ip {' '.join(argv)}: {r.stderr.strip()}")

    def namespace(self) -> str:
        ns = f"mcfemu-test-{self.tag}-{len(self.namespaces)}"
        self._ip("netns", "add", ns)
        self.namespaces.append(ns)
        self._ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def _veth(self, ns_a: str, ns_b: str, mtu: int) -> tuple[End, End]:
        self._n += 1
        a, b = f"mcf{self.tag}a{self._n}", f"mcf{self.tag}b{self._n}"  # <= 15 characters
        # created inside ns_a, peer moved to ns_b: no interface ever appears in the root namespace
        self._ip("-n", ns_a, "link", "add", a, "mtu", str(mtu), "type", "veth", "peer", "name", b, "netns", ns_b)
        for ns, dev in ((ns_a, a), (ns_b, b)):
            self._ip("-n", ns, "link", "set", dev, "mtu", str(mtu))
            self._ip("-n", ns, "link", "set", dev, "up")
        return End(ns_a, a), End(ns_b, b)

    def pair(self, mtu: int = 1500) -> tuple[End, End]:
        """Two new namespaces with one veth pair between them."""
        return self._veth(self.namespace(), self.namespace(), mtu)

    def star(self, n: int, mtu: int = 1500) -> tuple[End, list[End]]:
        """A hub namespace with a bridge (flooding every frame, no learning) and ``n`` namespaces on it.

        Returns the hub's own port on the bridge (for a checker or a listener) and one end per namespace.
        """
        hub = self.namespace()
        br = f"mcf{self.tag}br"
        self._ip("-n", hub, "link", "add", br, "type", "bridge", "ageing_time", "0", "stp_state", "0")
        self._ip("-n", hub, "link", "set", br, "mtu", str(mtu))
        self._ip("-n", hub, "link", "set", br, "up")
        ends = []
        for _ in range(n + 1):
            port, far = self._veth(hub, self.namespace(), mtu)
            self._ip("-n", hub, "link", "set", port.iface, "master", br)
            self._ip("-n", hub, "link", "set", port.iface, "type", "bridge_slave", "learning", "off")
            ends.append(far)
        return ends[0], ends[1:]

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
