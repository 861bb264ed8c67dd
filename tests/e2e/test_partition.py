"""A network partition between the database server and a worker and a publisher (issue 39).

A killed backend sends a reset; a partition sends nothing. The server runs here, a
survivor consumer beside it on 127.0.0.1, and a *victim* consumer and a publisher in a
network namespace (tests/netns.py) reaching the server over a veth link. The link is cut
silently — every packet dropped both ways — while the victim holds a job and the publisher
is publishing, for longer than the visibility timeout and the network timeout together,
then healed. What must hold:

* no process blocks on the silent connection: the victim and the publisher each report
  the lost connection (and start reconnecting) while the link is still cut — within
  ``network_timeout`` of silence, not the kernel's 15-minute retransmission limit;
* every publish that returned is run;
* the job the victim held lapses and the survivor takes it over (and works on it past the
  heal); the victim's ack, written after the link heals, is fenced (``stale ack``) and
  changes nothing: the survivor's ack of the job is the one that counts;
* the victim carries on by itself: with the survivor gone, it runs what is published next.

Where namespaces are refused (not root, or a container without the capabilities) the test
is skipped with the reason, under CI too (a machine fact, not a missing package); with
``ip`` missing it fails under CI.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import netns
import pytest
import servers
from e2e_harness import Proc, consumer_args, producer_args, sql, wait_until, written_ids
from support import unavailable

pytestmark = pytest.mark.timeout(300)

QUEUE = "partitioned"
#: Seconds of silence before a connection is given up (the transport option).
NETWORK_TIMEOUT = 3
VISIBILITY = 3
#: The cut: longer than a reservation and a network timeout together.
CUT_SECONDS = 12
#: Seconds the victim works on each job: the cut falls while it holds one.
VICTIM_WORK = 1.5
#: Jobs published through the link, one every 0.03 s: the cut falls while it publishes.
PUBLISHED = 400

#: The lines a process logs when it gives a connection up (store/executor.py; the
#: PostgreSQL listener).
LOST = re.compile(r"^(\d+\.\d+) WARNING \S+: (database|LISTEN) connection lost", re.M)


@pytest.fixture
def link() -> Iterator[netns.Link]:
    try:
        made = netns.make_link()
    except netns.NamespaceUnavailable as exc:
        if exc.refused:  # the rule: no root here, skipped with the reason, even in CI
            pytest.skip(f"network namespaces are refused here: {exc}")
        unavailable(f"cannot make a network namespace: {exc}")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest, link: netns.Link) -> Iterator[servers.Server]:
    """A server of its own, listening on 127.0.0.1 and the link's host address."""
    try:
        if request.param == "postgresql":
            started = servers.start_postgresql([link.host_address], [link.network])
        else:
            started = servers.start_mariadb([link.host_address])
    except (servers.ServerUnavailable, OSError) as exc:
        unavailable(f"{request.param} server unavailable: {exc}")
    try:
        yield started
    finally:
        started.stop()


def _losses(proc: Proc) -> list[float]:
    return [float(m.group(1)) for m in LOST.finditer(proc.stderr)]


def test_a_partition_longer_than_the_visibility_timeout_loses_nothing_and_hangs_nothing(
    spawn: Callable[..., Proc], link: netns.Link, server: servers.Server, tmp_path: Path
) -> None:
    near = "sqlqueue+" + server.create_database("cut_off")
    far = near.replace("127.0.0.1", link.host_address)
    options = ["--option", f"network_timeout={NETWORK_TIMEOUT}", "--log-times"]
    consumer_options = [*options, "--visibility", str(VISIBILITY), "--idle-exit", "240"]
    published, ran_near, ran_far = (tmp_path / n for n in ("published", "ran-near", "ran-far"))
    stop_near, stop_far = tmp_path / "stop-near", tmp_path / "stop-far"

    survivor = spawn(
        "survivor",
        consumer_args(near, QUEUE, "ack", "--out", str(ran_near), "--stop-file", str(stop_near),
                      "--sleep", "0.05", "--redelivered-sleep", str(CUT_SECONDS + 4),
                      *consumer_options),
    )  # fmt: skip
    victim = spawn(
        "victim",
        [*link.exec_args(),
         *consumer_args(far, QUEUE, "ack", "--out", str(ran_far), "--stop-file", str(stop_far),
                        "--sleep", str(VICTIM_WORK), *consumer_options)],
    )  # fmt: skip
    survivor.wait_event("ready", 60)
    victim.wait_event("ready", 60)
    publisher = spawn(
        "publisher",
        [*link.exec_args(),
         *producer_args(far, QUEUE, PUBLISHED, "p", "--interval", "0.03", "--out", str(published),
                        *options)],
    )  # fmt: skip

    # The survivor (20 jobs/s) falls behind the publisher (33/s): the victim always finds
    # a job. Cut just after it took one: it holds it (working) while the link is down.
    wait_until(lambda: len(victim.events("received")) >= 2, 60, what="the victim working")
    seen = len(victim.events("received"))
    wait_until(lambda: len(victim.events("received")) > seen, 30, what="the victim's next job")
    held = victim.events("received")[-1]
    cut_at = time.time()
    link.cut()
    try:
        time.sleep(CUT_SECONDS)
    finally:
        link.heal()
    healed_at = time.time()

    assert publisher.wait(timeout=150) == 0, publisher.output[-4000:]
    # Nothing blocked on the silent connection: both gave it up during the cut, within
    # the bound (the victim after finishing its job; a few seconds' slack for a busy machine).
    for proc, bound in ((victim, VICTIM_WORK + NETWORK_TIMEOUT), (publisher, NETWORK_TIMEOUT)):
        during = [t - cut_at for t in _losses(proc) if cut_at <= t < healed_at]
        assert during, f"{proc.name} noticed no lost connection during the cut:\n{proc.stderr}"
        print(f"{proc.name}: connection given up {min(during):.1f} s into the cut")
        assert min(during) < bound + 4, proc.stderr

    # The held job lapsed and the survivor ran it; the victim's late ack changed nothing.
    taken_over = [e for e in survivor.events("received") if e["body"]["id"] == held["body"]["id"]]
    assert taken_over and taken_over[0]["attempts"] >= 2, (held, survivor.events("received"))
    wait_until(lambda: "stale ack" in victim.stderr, 60, what="the victim's fenced ack")

    # Every publish that returned ran (some twice: at least once is the promise).
    returned = set(written_ids(published))
    assert len(returned) == PUBLISHED
    wait_until(
        lambda: returned <= set(written_ids(ran_near)) | set(written_ids(ran_far)),
        120,
        what="every returned publish run",
    )
    assert held["body"]["id"] in written_ids(ran_near)  # the survivor's run of it was acked

    # The victim carries on by itself once the survivor is gone.
    stop_near.touch()
    assert survivor.wait(timeout=60) == 0, survivor.output[-4000:]
    after = spawn("after", producer_args(near, QUEUE, 5, "after", *options))
    assert after.wait(timeout=60) == 0, after.output[-4000:]
    wait_until(
        lambda: {f"after-{n}" for n in range(5)} <= set(written_ids(ran_far)),
        60,
        what="the victim running what was published after the cut",
    )
    stop_far.touch()
    assert victim.wait(timeout=60) == 0, victim.output[-4000:]
    assert sql(near.removeprefix("sqlqueue+"), "SELECT count(*) FROM askr_jobs") == [(0,)]
