"""How long a connection to a database server may hear nothing before it is given up.

A killed backend or a restarted server sends a reset, and the driver raises at once. A
partition sends nothing: a firewall that drops, a NAT that forgets the connection, an
address moved by a cloud failover. Without a bound the client blocks in a read for as long
as the kernel keeps the connection (hours: 15 retransmissions for data sent, forever for a
connection that only waits). The transport option ``network_timeout`` is that bound, and
:class:`SilenceBound` turns it into what the kernel and the drivers take:

* ``TCP_USER_TIMEOUT``: a connection whose sent data goes unacknowledged this long is
  closed (a statement, a commit sent into the partition);
* TCP keepalives from half the bound on, every sixth of it: a connection waiting for an
  answer (its request acknowledged, the server working) or idle in the pool probes the
  server's kernel; with the user timeout set, Linux closes it once nothing has come back
  for the whole bound. A long statement on a live server is never cut: its kernel answers
  the probes;
* the connect timeout: a new connection that gets no answer (the reconnect loop during a
  partition) gives up after the bound.

The driver then raises a connection error and the executor reconnects, as after a restart
(``reconnect_timeout``). The bound applies to TCP connections only; a unix socket has no
network to lose. On MariaDB/MySQL the socket options are set once the driver has connected:
its handshake and login, a few round trips, are bounded by the connect timeout alone.
"""

from __future__ import annotations

import logging
import math
import socket
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: The largest bound: ``TCP_USER_TIMEOUT`` is a 32-bit count of milliseconds.
MAX_SECONDS = 2_000_000


@dataclass(frozen=True, slots=True)
class SilenceBound:
    """The settings that give up a connection after ``seconds`` of silence."""

    seconds: float

    @property
    def keepalive_idle(self) -> int:
        """Whole seconds of silence before the first keepalive probe."""
        return max(1, round(self.seconds / 2))

    @property
    def keepalive_interval(self) -> int:
        """Whole seconds between probes."""
        return max(1, round(self.seconds / 6))

    #: Unanswered probes before the connection is closed where the kernel has no user
    #: timeout (with it, the user timeout decides; see the module's docstring).
    keepalive_count: int = 3

    @property
    def user_timeout_ms(self) -> int:
        """``TCP_USER_TIMEOUT``: milliseconds sent data may go unacknowledged."""
        return max(1, round(self.seconds * 1000))

    @property
    def connect_timeout(self) -> int:
        """Whole seconds a connection attempt waits (libpq's minimum is 2)."""
        return max(2, math.ceil(self.seconds))

    def apply(self, sock: socket.socket) -> None:
        """Set keepalives and the user timeout on a connected TCP socket (a unix
        socket is left alone; an option the platform lacks, or a kernel refuses, is
        skipped and logged: a connection without the bound beats no connection)."""
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        for level, name, value in (
            (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
            (socket.IPPROTO_TCP, "TCP_KEEPIDLE", self.keepalive_idle),
            (socket.IPPROTO_TCP, "TCP_KEEPINTVL", self.keepalive_interval),
            (socket.IPPROTO_TCP, "TCP_KEEPCNT", self.keepalive_count),
            (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", self.user_timeout_ms),
        ):
            option = getattr(socket, name, None)
            if option is None:
                continue
            try:
                sock.setsockopt(level, option, value)
            except OSError as exc:
                logger.warning("cannot set %s on a database connection (%s)", name, exc)
