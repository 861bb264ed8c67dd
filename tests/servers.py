"""Throwaway PostgreSQL, MariaDB and Redis servers for the tests and benchmarks.

Each server gets a fresh data directory under a temporary folder and a free
port on 127.0.0.1, and is stopped (and its directory removed) by ``stop()``.
Debian's binaries are used (``postgresql``, ``mariadb-server``, ``redis-server``: the
broker users migrate from, for the migration tests); as root,
PostgreSQL runs as the ``postgres`` user (it refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class ServerUnavailable(RuntimeError):
    """The server's binaries are missing or it did not start."""


def in_ci() -> bool:
    """True under ``CI=true``: a test missing what it needs fails instead of skipping."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerUnavailable(f"server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise ServerUnavailable(
        f"server did not listen on {port} in {timeout}s: {log.read_text()[-2000:]}"
    )


@dataclass
class Server:
    """A running throwaway server."""

    engine: str
    port: int
    root: Path
    proc: subprocess.Popen[bytes]
    admin_url: str
    databases: list[str] = field(default_factory=list)

    def url(self, database: str) -> str:
        """SQLAlchemy URL (no driver) of ``database`` on this server."""
        if self.engine == "postgresql":
            return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
        if self.engine == "redis":  # a database number
            return f"redis://127.0.0.1:{self.port}/{database}"
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")  # name: [a-z0-9_] from our tests
        engine.dispose()
        self.databases.append(name)
        return self.url(name)

    user: str | None = None

    def _shutdown(self) -> None:
        if self.proc.poll() is None:
            # PostgreSQL: SIGINT is a fast shutdown (SIGTERM waits for clients).
            self.proc.send_signal(signal.SIGINT if self.engine == "postgresql" else signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def stop(self) -> None:
        self._shutdown()
        shutil.rmtree(self.root, ignore_errors=True)

    def restart(self) -> None:
        """Stop the server (fast shutdown) and start it again on the same data and port."""
        args = self.proc.args
        self._shutdown()
        log = self.root / "server.log"
        with log.open("ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, user=self.user, group=self.user
            )
        _wait_port(self.port, self.proc, log)
        time.sleep(0.3)


def _postgresql_bindir() -> Path:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        raise ServerUnavailable("PostgreSQL is not installed (apt-get install postgresql)")
    return Path(bins[-1]).parent


def _postgresql_root(prefix: str) -> tuple[Path, str | None]:
    """A new server directory, and the user to run as (PostgreSQL refuses root)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        return root, "postgres"
    return root, None


def _run_postgresql(
    bindir: Path, root: Path, user: str | None, also_on: Sequence[str] = ()
) -> Server:
    """Start ``postgres`` on ``root/data`` and a free port (no wrapper process), listening
    on 127.0.0.1 and the addresses ``also_on``."""
    log = root / "server.log"
    port = free_port()
    cmd = [
        str(bindir / "postgres"), "-D", str(root / "data"), "-p", str(port),
        "-c", f"listen_addresses={','.join(['127.0.0.1', *also_on])}",
        "-c", f"unix_socket_directories={root}",
        "-c", "max_connections=200", "-c", "shared_buffers=128MB",
    ]  # fmt: skip
    with log.open("ab") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, user=user, group=user)
    _wait_port(port, proc, log)
    time.sleep(0.3)  # accepting TCP slightly before it accepts logins
    admin = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    return Server("postgresql", port, root, proc, admin, user=user)


def start_postgresql(also_on: Sequence[str] = (), trusting: Sequence[str] = ()) -> Server:
    """A new server on 127.0.0.1 (and the addresses ``also_on``), trusting logins from
    127.0.0.1 (and the networks ``trusting``, CIDR)."""
    bindir = _postgresql_bindir()
    root, user = _postgresql_root("sqlqueue-pg-")
    subprocess.run(
        [str(bindir / "initdb"), "-D", str(root / "data"), "-U", "postgres",
         "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True, capture_output=True, timeout=120, user=user, group=user,
    )  # fmt: skip
    with (root / "data" / "pg_hba.conf").open("a") as hba:
        hba.writelines(f"host all all {network} trust\n" for network in trusting)
    return _run_postgresql(bindir, root, user, also_on)


def start_postgresql_standby(primary: Server) -> Server:
    """A streaming standby of ``primary`` (``pg_basebackup -R``), promotable with
    ``SELECT pg_promote()``; the primary's default ``pg_hba.conf`` trusts replication
    from 127.0.0.1."""
    bindir = _postgresql_bindir()
    root, user = _postgresql_root("sqlqueue-pg-standby-")
    subprocess.run(
        [str(bindir / "pg_basebackup"), "-D", str(root / "data"), "-h", "127.0.0.1",
         "-p", str(primary.port), "-U", "postgres", "-R", "-X", "stream", "-c", "fast",
         "--no-sync"],
        check=True, capture_output=True, timeout=120, user=user, group=user,
    )  # fmt: skip
    return _run_postgresql(bindir, root, user)


def _mariadb_binaries() -> tuple[str, str]:
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    install = shutil.which("mariadb-install-db")
    if not install or not os.path.exists(mariadbd):
        raise ServerUnavailable("MariaDB is not installed (apt-get install mariadb-server)")
    return mariadbd, install


def _mariadb_root(install: str, prefix: str, user: str | None) -> Path:
    """A new server directory with a bootstrapped data directory (``root/data``), owned by
    ``user`` (None: this process's user)."""
    for attempt in (1, 2):
        root = Path(tempfile.mkdtemp(prefix=prefix))
        if user is not None:
            shutil.chown(root, user, user)
        done = subprocess.run(
            [install, "--no-defaults", f"--datadir={root / 'data'}",
             "--auth-root-authentication-method=normal", "--skip-test-db",
             *([f"--user={user}"] if user else [])],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return root
        # Seen once in many runs: the bootstrap exits 1 part-way; a fresh datadir works.
        shutil.rmtree(root, ignore_errors=True)
        if attempt == 2:
            raise ServerUnavailable(
                f"mariadb-install-db exited {done.returncode}: "
                f"{(done.stderr or done.stdout)[-2000:]}"
            )
    raise AssertionError("unreachable")


def start_mariadb(also_on: Sequence[str] = ()) -> Server:
    """A new server on 127.0.0.1 (and the addresses ``also_on``), without grant tables:
    any user from anywhere it listens."""
    mariadbd, install = _mariadb_binaries()
    user = "root" if os.geteuid() == 0 else None
    root = _mariadb_root(install, "sqlqueue-maria-", user)
    log = root / "server.log"
    port = free_port()
    cmd = [
        mariadbd, "--no-defaults", f"--datadir={root / 'data'}", f"--port={port}",
        f"--bind-address={','.join(['127.0.0.1', *also_on])}",
        f"--socket={root}/mysqld.sock", f"--pid-file={root}/mysqld.pid",
        "--skip-grant-tables", "--skip-name-resolve", "--max-connections=300",
        "--innodb-buffer-pool-size=256M", *([f"--user={user}"] if user else []),
    ]  # fmt: skip
    with log.open("ab") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    _wait_port(port, proc, log)
    return Server("mysql", port, root, proc, f"mysql+pymysql://root@127.0.0.1:{port}/mysql")


def _galera_state(port: int) -> str:
    import pymysql

    try:
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", connect_timeout=2)
    except pymysql.err.OperationalError:
        return "unreachable"
    with conn, conn.cursor() as cursor:
        cursor.execute("SHOW STATUS LIKE 'wsrep_local_state_comment'")
        row = cursor.fetchone()
    return str(row[1]) if row else "?"


def start_galera(nodes: int = 3) -> list[Server]:
    """A MariaDB Galera cluster (Debian ``galera-4``) of ``nodes`` nodes on 127.0.0.1, the
    first bootstrapping it and each next one joining by a state transfer (rsync); returned
    once every node is Synced. As root the nodes run as ``mysql``: rsync's SST daemon, run
    by root, would drop to ``nobody`` and could not write the joiner's data directory."""
    provider = "/usr/lib/galera/libgalera_smm.so"
    if not os.path.exists(provider) or shutil.which("rsync") is None:
        raise ServerUnavailable("Galera needs galera-4 and rsync (apt-get install galera-4 rsync)")
    mariadbd, install = _mariadb_binaries()
    user = "mysql" if os.geteuid() == 0 else None
    ports = [(free_port(), free_port(), free_port(), free_port()) for _ in range(nodes)]
    members = ",".join(f"127.0.0.1:{group}" for _, group, _, _ in ports)
    started: list[Server] = []
    try:
        for n, (port, group, ist, sst) in enumerate(ports):
            root = _mariadb_root(install, f"sqlqueue-galera{n}-", user)
            log = root / "server.log"
            cmd = [
                mariadbd, "--no-defaults", f"--datadir={root / 'data'}", f"--port={port}",
                "--bind-address=127.0.0.1", f"--socket={root}/mysqld.sock",
                f"--pid-file={root}/mysqld.pid", "--skip-name-resolve", "--max-connections=300",
                "--innodb-buffer-pool-size=128M", "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2", "--innodb-flush-log-at-trx-commit=1",
                "--wsrep-on=ON", f"--wsrep-provider={provider}", "--wsrep-cluster-name=sqlqueue",
                f"--wsrep-cluster-address=gcomm://{members}",
                f"--wsrep-node-address=127.0.0.1:{group}", f"--wsrep-node-name=node{n}",
                f"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};"
                f"ist.recv_addr=127.0.0.1:{ist}",
                "--wsrep-sst-method=rsync", f"--wsrep-sst-receive-address=127.0.0.1:{sst}",
                *(["--wsrep-new-cluster"] if n == 0 else []),
                *([f"--user={user}"] if user else []),
            ]  # fmt: skip
            with log.open("ab") as out:  # the child keeps its own descriptor
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            server = Server(
                "mysql", port, root, proc, f"mysql+pymysql://root@127.0.0.1:{port}/mysql"
            )
            started.append(server)
            deadline = time.monotonic() + 120
            while _galera_state(port) != "Synced":
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ServerUnavailable(
                        f"Galera node {n} did not join: {log.read_text()[-3000:]}"
                    )
                time.sleep(0.3)
    except BaseException:
        for server in started:
            server.stop()
        raise
    return started


def start_redis() -> Server:
    """Redis with persistence off: the old broker a migration drains (never ours to test)."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        raise ServerUnavailable("Redis is not installed (apt-get install redis-server)")
    root = Path(tempfile.mkdtemp(prefix="sqlqueue-redis-"))
    log = root / "server.log"
    port = free_port()
    cmd = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(root), "--daemonize", "no",
    ]  # fmt: skip
    with log.open("ab") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    _wait_port(port, proc, log)
    return Server("redis", port, root, proc, f"redis://127.0.0.1:{port}/0")


STARTERS = {"postgresql": start_postgresql, "mysql": start_mariadb, "redis": start_redis}
