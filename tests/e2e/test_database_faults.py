"""Faults of the database server under a running Celery fleet (issue 39): every connection
killed again and again, a snapshot held open, the primary killed and its synchronous standby
promoted. Real ``celery worker`` processes and Kombu producer/consumer processes; nothing
lost, the workers alive throughout, and what ran twice counted (at least once is the
promise; the figures go in docs/engines.md). A partition: test_partition.py.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import servers
import sqlalchemy as sa
from apps.celery_app import create_app
from celery import Celery
from e2e_harness import (
    Proc,
    celery_worker_args,
    consumer_args,
    producer_args,
    task_events,
    wait_until,
    written_ids,
)
from support import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

VISIBILITY = 3.0


def start_workers(spawn: Callable[..., Proc], brokers: list[str], out_file: Path) -> list[Proc]:
    """A ``celery worker`` (prefork, 2 children, prefetch 4) on each of ``brokers``."""
    workers = []
    for n, broker_url in enumerate(brokers):
        workers.append(
            spawn(
                f"worker{n}",
                celery_worker_args(f"faults{n}"),
                E2E_BROKER_URL=broker_url,
                E2E_OUT=str(out_file),
                E2E_VISIBILITY=str(VISIBILITY),
                E2E_PREFETCH="4",
            )
        )
    for worker in workers:
        worker.wait_text("ready.", timeout=60)
    return workers


def stop_workers(workers: list[Proc]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=30)


#: Every connection to the database but the killer's own: PostgreSQL's and MariaDB's way.
_VICTIMS = {
    "postgresql": (
        "SELECT pid FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"
    ),
    "mysql": (
        "SELECT id FROM information_schema.processlist WHERE db = :db AND id <> CONNECTION_ID()"
    ),
}
_KILL = {
    "postgresql": "SELECT pg_terminate_backend(:victim)",
    "mysql": "KILL CONNECTION :victim",
}


class BackendKiller(threading.Thread):
    """Kills every client connection to ``database`` every ``interval`` seconds."""

    def __init__(self, engine_name: str, admin_url: str, database: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.engine_name, self.database, self.interval = engine_name, database, interval
        self.db = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.stop = threading.Event()
        self.rounds = self.killed = 0

    def run(self) -> None:
        with self.db.connect() as conn:
            while not self.stop.wait(self.interval):
                victims = conn.execute(
                    sa.text(_VICTIMS[self.engine_name]), {"db": self.database}
                ).scalars()
                for victim in list(victims):
                    try:
                        conn.execute(sa.text(_KILL[self.engine_name]), {"victim": victim})
                        self.killed += 1
                    except sa.exc.DBAPIError:  # gone meanwhile
                        pass
                self.rounds += 1

    def __enter__(self) -> BackendKiller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=30)
        self.db.dispose()


@pytest.mark.parametrize("engine_name", ["postgresql", "mysql"])  # the server engines
def test_every_connection_killed_again_and_again_loses_no_task(
    engine_name: str,
    db_url: str,
    db_server: servers.Server,
    broker_url: str,
    app: Celery,
    spawn: Callable[..., Proc],
    out_file: Path,
) -> None:
    """Two workers (prefork, 2 children each) and the publishing test, every client
    connection of the database killed every 0.25 s while 3,000 tasks are sent (~10 s) and
    run."""
    workers = start_workers(spawn, [broker_url] * 2, out_file)
    labels = [f"t{n}" for n in range(3000)]
    database = str(sa.make_url(db_url).database)
    with BackendKiller(engine_name, db_server.admin_url, database, 0.25) as killer:
        for n, label in enumerate(labels):
            app.send_task("e2e.record", (label,))
            if n % 15 == 14:
                time.sleep(0.05)  # a steady stream, killed throughout
        wait_until(
            lambda: {e["label"] for e in task_events(out_file)} >= set(labels),
            150,
            what="every task run",
        )
    runs = Counter(e["label"] for e in task_events(out_file))
    twice = sum(1 for n in runs.values() if n > 1)
    print(
        f"{engine_name}: {killer.killed} connections killed in {killer.rounds} rounds; "
        f"{len(labels)} tasks, 0 lost, {twice} run twice"
    )
    assert killer.rounds >= 30 and killer.killed >= 60, "too few kills to make the point"
    assert all(w.popen.poll() is None for w in workers), "a worker died"
    stop_workers(workers)


def _dead_rows(conn: sa.Connection) -> int:
    """The queue table's dead row versions VACUUM could not remove (its own report)."""
    conn.exec_driver_sql("VACUUM askr_jobs")
    found = conn.exec_driver_sql(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'askr_jobs'"
    ).scalar()
    return int(found or 0)


@pytest.mark.parametrize("engine_name", ["postgresql"])  # MVCC's vacuum horizon
def test_a_snapshot_held_open_neither_stops_the_queue_nor_outlives_its_release(
    engine_name: str,
    db_url: str,
    broker_url: str,
    app: Celery,
    spawn: Callable[..., Proc],
    out_file: Path,
) -> None:
    """An application's forgotten REPEATABLE READ transaction holds back vacuum: every
    job's dead row versions stay. The queue keeps running meanwhile (every task sent while
    it is held runs while it is held), and at its release vacuum removes them all."""
    workers = start_workers(spawn, [broker_url] * 2, out_file)
    app_db = sa.create_engine(
        db_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    labels = [f"s{n}" for n in range(1000)]
    try:
        with app_db.connect() as holder, app_db.connect() as dba:
            holder.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.exec_driver_sql("SELECT count(*) FROM askr_jobs").scalar()  # the snapshot
            for n, label in enumerate(labels):
                app.send_task("e2e.record", (label,))
                if n % 100 == 99:
                    time.sleep(0.1)  # a steady stream, not one burst
            wait_until(
                lambda: {e["label"] for e in task_events(out_file)} >= set(labels),
                120,
                what="every task run while the snapshot is held",
            )
            held_back = _dead_rows(dba)
            holder.exec_driver_sql("COMMIT")
            released = _dead_rows(dba)
    finally:
        app_db.dispose()
    print(f"dead row versions VACUUM left: {held_back} while held, {released} after the release")
    assert held_back >= len(labels)  # the snapshot held (else the test shows nothing)
    assert released == 0
    assert all(w.popen.poll() is None for w in workers), "a worker died"
    stop_workers(workers)


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[servers.Server, servers.Server]]:
    """A primary with a synchronous streaming standby (every commit on both)."""
    try:
        primary = servers.start_postgresql()
    except (servers.ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
        unavailable(f"postgresql server unavailable: {exc}")
    standby = None
    try:
        primary.create_database("q")
        standby = servers.start_postgresql_standby(primary)
        admin = sa.create_engine(primary.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.exec_driver_sql("SELECT pg_reload_conf()")
        finally:
            admin.dispose()
        yield primary, standby
    finally:
        for server in (standby, primary):
            if server is not None:
                server.stop()


def test_the_primary_killed_and_its_synchronous_standby_promoted_loses_no_publish(
    primary_and_standby: tuple[servers.Server, servers.Server],
    spawn: Callable[..., Proc],
    tmp_path: Path,
) -> None:
    """Publisher and consumers on the documented multi-host URL; the primary killed (-9)
    mid-run and the standby promoted: every publish that returned runs."""
    primary, standby = primary_and_standby
    broker = (
        f"sqlqueue+postgresql://postgres@/q?host=127.0.0.1:{primary.port}"
        f"&host=127.0.0.1:{standby.port}&target_session_attrs=read-write"
    )
    published, stop = tmp_path / "published", tmp_path / "stop"
    ran = [tmp_path / f"ran-{n}" for n in range(2)]
    consumers = [
        spawn(f"consumer{n}", consumer_args(broker, "q", "ack", "--out", str(out),
              "--stop-file", str(stop), "--visibility", str(VISIBILITY), "--idle-exit", "120"))
        for n, out in enumerate(ran)
    ]  # fmt: skip
    for consumer in consumers:
        consumer.wait_event("ready", 60)
    publisher = spawn(
        "publisher",
        producer_args(broker, "q", 3000, "f", "--interval", "0.002", "--out", str(published)),
    )
    wait_until(lambda: len(written_ids(published)) >= 800, 60, what="publishing under way")
    killed_at = time.time()
    primary.proc.kill()
    primary.proc.wait(timeout=30)
    before = len(written_ids(published))  # the primary is gone: the rest can only go to the standby
    admin = sa.create_engine(standby.admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_promote(true, 60)").scalar() is True
    finally:
        admin.dispose()
    assert publisher.wait(timeout=150) == 0, publisher.output[-4000:]
    returned = written_ids(published)
    assert len(returned) == 3000
    wait_until(
        lambda: set(returned) <= {i for out in ran for i in written_ids(out)},
        120,
        what="every returned publish run",
    )
    stop.touch()
    for consumer in consumers:
        assert consumer.wait(timeout=60) == 0, consumer.output[-4000:]
    runs = Counter(i for out in ran for i in written_ids(out))
    after = [
        e["t"]
        for c in consumers
        for e in c.events("received")
        if int(e["body"]["id"].split("-")[1]) >= before  # published after the kill
    ]
    print(
        f"failover: {len(returned)} publishes kept, 0 lost, "
        f"{sum(1 for n in runs.values() if n > 1)} run twice, "
        f"work resumed {min(after) - killed_at:.1f} s after the kill"
    )


_GALERA_DATABASES = itertools.count()


def _start_galera() -> list[servers.Server]:
    try:
        return servers.start_galera(3)
    except (servers.ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
        unavailable(f"Galera cluster unavailable: {exc}")


@pytest.fixture(scope="module")
def galera_cluster() -> Iterator[list[servers.Server]]:
    """A 3-node MariaDB Galera cluster the tests that kill no node share (one costs ~17 s
    to start): each works in a database of its own."""
    nodes = _start_galera()
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def galera(galera_cluster: list[servers.Server]) -> str:
    """An empty database of this test's on the shared cluster (replicated to every node)."""
    name = f"q{next(_GALERA_DATABASES)}"
    galera_cluster[0].create_database(name)
    return name


@pytest.fixture
def galera_to_break() -> Iterator[list[servers.Server]]:
    """A 3-node cluster of its own, with an empty database ``q``, for a test that kills a
    node."""
    nodes = _start_galera()
    try:
        nodes[0].create_database("q")  # replicated to the others
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _galera_conflicts(nodes: list[servers.Server]) -> tuple[int, int]:
    """Certification failures and brute-force aborts, summed over the live nodes."""
    cert = bf = 0
    for node in nodes:
        if node.proc.poll() is not None:
            continue
        db = sa.create_engine(node.admin_url)
        with db.connect() as conn:
            status = dict(conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'wsrep_local_%%'").all())
        db.dispose()
        cert += int(status.get("wsrep_local_cert_failures", 0))
        bf += int(status.get("wsrep_local_bf_aborts", 0))
    return cert, bf


def _send_and_wait(
    broker_url: str,
    labels: list[str],
    out_file: Path,
    timeout: float,
    midway: Callable[[], None] | None = None,
) -> None:
    """Send an ``e2e.record`` task per label in a steady stream (``midway`` called after
    the 600th send: the fault, mid-run), then wait until every one has run."""
    app = create_app(broker_url, visibility=VISIBILITY)
    try:
        for n, label in enumerate(labels):
            app.send_task("e2e.record", (label,))
            if n == 600 and midway is not None:
                midway()
            if n % 50 == 49:
                time.sleep(0.05)
    finally:
        app.close()
    wait_until(
        lambda: {e["label"] for e in task_events(out_file)} >= set(labels),
        timeout,
        what="every task run",
    )


@pytest.mark.parametrize("topology", ["one-writer", "spread"])
def test_a_galera_cluster_runs_every_task_on_one_writer_node_or_spread(
    galera_cluster: list[servers.Server],
    galera: str,
    topology: str,
    spawn: Callable[..., Proc],
    out_file: Path,
) -> None:
    """Two workers and the publisher on node 0 (the advised topology: one writer), or the
    workers on nodes 1 and 2 and the publisher on node 0 (spread: certification is all that
    stands between two claims of one job). Every task runs; on one writer none twice."""
    urls = [f"sqlqueue+mysql://root@127.0.0.1:{node.port}/{galera}" for node in galera_cluster]
    cert_before, bf_before = _galera_conflicts(galera_cluster)  # the counters are the server's
    workers = start_workers(
        spawn, [urls[0], urls[0]] if topology == "one-writer" else urls[1:], out_file
    )
    labels = [f"g{n}" for n in range(2000)]
    _send_and_wait(urls[0], labels, out_file, 150)
    runs = Counter(e["label"] for e in task_events(out_file))
    twice = sum(1 for n in runs.values() if n > 1)
    cert, bf = _galera_conflicts(galera_cluster)
    cert, bf = cert - cert_before, bf - bf_before
    print(
        f"galera {topology}: {len(labels)} tasks, 0 lost, {twice} run twice; "
        f"{cert} certification failures, {bf} brute-force aborts"
    )
    if topology == "one-writer":
        assert twice == 0
    assert all(w.popen.poll() is None for w in workers), "a worker died"
    stop_workers(workers)


def test_a_galera_node_killed_mid_run_loses_no_task(
    galera_to_break: list[servers.Server], spawn: Callable[..., Proc], out_file: Path
) -> None:
    """Workers on nodes 1 and 2, the publisher on node 0; node 2 killed (-9) mid-run: its
    worker is cut off, the jobs it held lapse and the worker on node 1 runs them."""
    galera = galera_to_break
    urls = [f"sqlqueue+mysql://root@127.0.0.1:{node.port}/q" for node in galera]
    workers = start_workers(spawn, urls[1:], out_file)
    labels = [f"k{n}" for n in range(2000)]

    def kill_node_2() -> None:
        wait_until(lambda: len(task_events(out_file)) >= 300, 60, what="work under way")
        galera[2].proc.kill()
        galera[2].proc.wait(timeout=30)

    _send_and_wait(urls[0], labels, out_file, 150, midway=kill_node_2)
    runs = Counter(e["label"] for e in task_events(out_file))
    print(
        f"galera node killed: {len(labels)} tasks, 0 lost, "
        f"{sum(1 for n in runs.values() if n > 1)} run twice"
    )
    assert workers[0].popen.poll() is None, "the worker on a live node died"
