"""A network namespace joined to this one by a veth pair, for partition tests.

Processes started with :meth:`Link.exec_args` run in the namespace and reach a server of
this namespace at :attr:`Link.host_address` (the server listens there beside 127.0.0.1;
both addresses exist only on this machine). :meth:`Link.cut` drops every packet of the
link, both ways, *silently* — as a firewall's DROP, a NAT that forgot the connection or an
address moved away by a failover: no reset, no ICMP, a connect gets no answer — and
:meth:`Link.heal` restores it.

The drop: each end's neighbour entry for the other is replaced by a MAC address no one
has, so the receiving veth drops every frame as addressed to another host. (This machine
has neither ``tc netem`` nor iptables; taking the link down or a blackhole route answers a
connect at once with EHOSTUNREACH or EINVAL, which is not a partition.)

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN: a container may refuse them even to root) and
iproute2; :func:`make_link` raises :class:`NamespaceUnavailable` otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess

_NOBODY_MAC = "02:00:00:00:00:99"


class NamespaceUnavailable(RuntimeError):
    """Network namespaces cannot be made here: not root or not allowed (``refused``), or
    no ``ip``."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        said = done.stderr.strip()
        refused = "not permitted" in said or "Permission denied" in said
        raise NamespaceUnavailable(f"ip {' '.join(args)}: {said}", refused=refused)


class Link:
    """A namespace ``name`` and the veth pair joining it to this one."""

    def __init__(self, tag: int) -> None:
        self.name = f"sqlq-part-{tag}"
        self.host_side, self.guest_side = f"sqp{tag}h", f"sqp{tag}g"
        subnet = f"10.231.{tag % 250}"
        self.host_address, self.guest_address = f"{subnet}.1", f"{subnet}.2"
        #: The namespace's addresses (for a server's access rules).
        self.network = f"{subnet}.0/30"

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_side, "type", "veth", "peer", "name", self.guest_side)
        _ip("link", "set", self.guest_side, "netns", self.name)
        _ip("addr", "add", f"{self.host_address}/30", "dev", self.host_side)
        _ip("link", "set", self.host_side, "up")
        for args in (
            ("addr", "add", f"{self.guest_address}/30", "dev", self.guest_side),
            ("link", "set", self.guest_side, "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("-n", self.name, *args)

    def exec_args(self) -> list[str]:
        """The prefix that runs a command in the namespace (``ip netns exec`` execs it:
        the process keeps the pid, so signals and process groups work as usual)."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        _ip("neigh", "replace", self.guest_address, "lladdr", _NOBODY_MAC, "dev",
            self.host_side, "nud", "permanent")  # fmt: skip
        _ip("-n", self.name, "neigh", "replace", self.host_address, "lladdr", _NOBODY_MAC,
            "dev", self.guest_side, "nud", "permanent")  # fmt: skip

    def heal(self) -> None:
        _ip("neigh", "del", self.guest_address, "dev", self.host_side)
        _ip("-n", self.name, "neigh", "del", self.host_address, "dev", self.guest_side)

    def close(self) -> None:
        """Remove the namespace (its veth end, and so the pair, goes with it)."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_side], capture_output=True, check=False)


def make_link() -> Link:
    if os.geteuid() != 0:
        raise NamespaceUnavailable(
            "network namespaces need root (the test runs as a user)", refused=True
        )
    if shutil.which("ip") is None:
        raise NamespaceUnavailable("iproute2's ip is not installed (apt-get install iproute2)")
    link = Link(os.getpid() % 100000)
    link.close()  # a namespace left by a killed run of this pid
    try:
        link.create()
    except NamespaceUnavailable:
        link.close()
        raise
    return link
