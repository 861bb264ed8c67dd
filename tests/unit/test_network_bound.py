"""network_timeout turned into socket options (the partition: tests/e2e/test_partition.py)."""

from __future__ import annotations

import socket

import pytest

from kombu_sqlqueue.exceptions import ConfigurationError
from kombu_sqlqueue.options import TransportOptions
from kombu_sqlqueue.store import StoreOptions
from kombu_sqlqueue.store.network import SilenceBound


@pytest.mark.parametrize(
    ("seconds", "idle", "interval", "user_ms", "connect"),
    [(30, 15, 5, 30000, 30), (3, 2, 1, 3000, 3), (1, 1, 1, 1000, 2), (2.5, 1, 1, 2500, 3)],
)
def test_the_bound_in_whole_seconds(
    seconds: float, idle: int, interval: int, user_ms: int, connect: int
) -> None:
    bound = SilenceBound(seconds)
    assert (bound.keepalive_idle, bound.keepalive_interval) == (idle, interval)
    assert (bound.user_timeout_ms, bound.connect_timeout) == (user_ms, connect)


def test_a_tcp_socket_gets_keepalives_and_the_user_timeout() -> None:
    with socket.socket() as listening, socket.socket() as sock:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        sock.connect(listening.getsockname())
        SilenceBound(9).apply(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 4
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 2
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 9000


def test_a_unix_socket_is_left_alone() -> None:
    left, right = socket.socketpair()
    with left, right:
        SilenceBound(9).apply(left)  # TCP options on a unix socket would raise
        assert left.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0


def test_an_option_the_kernel_refuses_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:  # no TCP options on UDP
        SilenceBound(9).apply(udp)
    assert "cannot set TCP_KEEPIDLE" in caplog.text


def test_the_option_defaults_to_30_seconds_and_refuses_what_no_kernel_takes() -> None:
    assert TransportOptions.from_mapping({}).store_options().network_timeout == 30.0
    assert TransportOptions.from_mapping({"network_timeout": 4}).network_timeout == 4.0
    with pytest.raises(ConfigurationError, match="network_timeout must be >= 1"):
        TransportOptions.from_mapping({"network_timeout": 0.5})
    for wrong in (float("inf"), float("nan"), 3e6):
        with pytest.raises(ConfigurationError, match="network_timeout must be"):
            TransportOptions.from_mapping({"network_timeout": wrong})
        with pytest.raises(ConfigurationError, match="between 1 and 2,000,000 seconds"):
            StoreOptions(network_timeout=wrong)
