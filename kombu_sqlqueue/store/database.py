"""Opening a database, and what every store over one shares.

:class:`Database` is one URL opened once: our engine (connection hooks, limits),
SQLAlchemy's engine and pool (``db``), and the one :class:`~.executor.Executor`.
:class:`TableStore` is the base of every store (the contract-v1 ``JobStore``,
another layout's, the tables a package keeps beside them): it runs work in one
transaction, creates or verifies its tables once, and reads one clock. Stores
opened on the same :class:`Database` share its pool.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from ..exceptions import (
    ConfigurationError,
    InvalidURL,
    MessageTooLarge,
    SchemaMismatch,
    WrongDatabase,
)
from .engines import ENGINES, BaseEngine
from .engines.base import READ_ONLY, Queries
from .enlist import CallerExecutor, Enlistment, active
from .executor import Executor, Tx
from .network import MAX_SECONDS
from .schema import TableSpec

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Connection-level settings of a store."""

    #: Create the tables on first use (operators can switch this off and run
    #: ``python -m kombu_sqlqueue create-tables``).
    create_tables: bool = True
    #: SQLite ``PRAGMA synchronous``: NORMAL (default) or FULL; see docs/configuration.md.
    sqlite_synchronous: str = "NORMAL"
    #: Seconds a writer waits for another writer's lock before retrying.
    busy_timeout: float = 30.0
    #: Seconds to keep reconnecting after a working connection is lost (server restart).
    reconnect_timeout: float = 60.0
    #: Seconds a connection to a database server may hear nothing from it before it is
    #: given up and reconnected (a partition sends no reset); see ``store/network.py``.
    network_timeout: float = 30.0
    #: PostgreSQL ``synchronous_commit`` for the queue's own connections (None: the
    #: server's setting); see docs/engines.md.
    synchronous_commit: str | None = None
    #: The Django database alias whose ``atomic()`` blocks a publish joins by itself (the
    #: transport option ``django_atomic``); None: only ``enlist`` blocks.
    django_atomic: str | None = None

    def __post_init__(self) -> None:
        # Every engine checks the options it reads, whatever the URL: a typo fails now
        # (in ENGINES' order, so of two bad values the same one is named every time).
        for engine_cls in dict.fromkeys(ENGINES.values()):
            engine_cls.check_options(self)
        if self.busy_timeout <= 0:
            raise ConfigurationError(f"busy_timeout must be > 0 seconds, got {self.busy_timeout!r}")
        if not 1 <= self.network_timeout <= MAX_SECONDS:  # NaN fails too
            raise ConfigurationError(
                f"network_timeout must be between 1 and {MAX_SECONDS:,} seconds, "
                f"got {self.network_timeout!r}"
            )


#: The broker URL's scheme: ``sqlqueue+<database-url>``.
BROKER_PREFIX = "sqlqueue+"


def suggested_url(url: str) -> str | None:
    """The broker URL someone who wrote ``url`` most likely meant, when it is almost one:
    a bare SQLite file path (``/tmp/q.db`` → ``sqlqueue+sqlite:////tmp/q.db``), or
    ``sqlqueue://`` without its database (``sqlqueue:///q.db`` → ``sqlqueue+sqlite:///q.db``).
    None when nothing is near."""
    if "://" not in url:
        path = url.removeprefix(BROKER_PREFIX)
        if path and not path.startswith(("-", ":")) and not any(c.isspace() for c in path):
            return f"{BROKER_PREFIX}sqlite:///{path}"
        return None
    scheme, rest = url.split("://", 1)
    if scheme == "sqlqueue" and rest.startswith("/") and len(rest) > 1:
        return f"{BROKER_PREFIX}sqlite://{rest}"
    return None


def did_you_mean(url: str) -> str:
    """``"; did you mean …?"`` for :func:`suggested_url`, or nothing."""
    suggestion = suggested_url(url)
    return f"; did you mean {suggestion}?" if suggestion else ""


def parse_store_url(url: str) -> tuple[type[BaseEngine], URL]:
    """Split a store URL (``sqlite:///queue.db``) into its engine class and SQLAlchemy URL."""
    if url.split("://", 1)[0] == "sqlqueue":  # the broker's scheme with no database after it
        raise InvalidURL(
            f"{url!r} names no database: write sqlqueue+<database-url>, e.g. "
            "sqlqueue+sqlite:///queue.db, sqlqueue+postgresql://user@host/db or "
            f"sqlqueue+mysql://user@host/db{did_you_mean(url)}"
        )
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError) as exc:
        hint = did_you_mean(url) or " (e.g. sqlqueue+sqlite:///queue.db)"
        raise InvalidURL(f"cannot parse database URL {url!r}: {exc}{hint}") from exc
    scheme = parsed.get_backend_name()
    engine_cls = ENGINES.get(scheme)
    if engine_cls is None:
        hint = did_you_mean(url) or " (e.g. sqlqueue+sqlite:///queue.db)"
        raise InvalidURL(
            f"database {scheme!r} in {url!r} is not supported; "
            f"supported: {', '.join(sorted(ENGINES))}{hint}"
        )
    return engine_cls, engine_cls().normalize_url(parsed)


class Database:
    """One database URL, opened once: share it between stores for one pool."""

    def __init__(self, url: str, options: StoreOptions | None = None) -> None:
        self.options = options or StoreOptions()
        engine_cls, self.url = parse_store_url(url)
        #: Ours: hooks, limits and the class of statements (see ``store/engines/``).
        self.engine: BaseEngine = engine_cls()
        try:
            #: SQLAlchemy's engine: the pool.
            self.db: sa.Engine = self.engine.create_engine(self.url, self.options)
        except ImportError as exc:  # an optional driver is missing
            raise ConfigurationError(
                f"the driver for {self.url.drivername} is not installed ({exc}); "
                f"install it with: pip install 'kombu-sqlqueue[{self.engine.name}]'"
            ) from exc
        self.executor = Executor(
            self.engine,
            self.db,
            self.url.render_as_string(hide_password=True),
            reconnect_timeout=self.options.reconnect_timeout,
        )
        self._identity: Hashable | None = None

    def identity(self, *, again: bool = False) -> Hashable:
        """Which database this is (``Queries.identity_of``), read once (``again``: read
        anew — a server restart or a failover changes it): what an enlisted publish's
        connection must match."""
        if self._identity is None or again:
            identity_of = self.engine.queries.identity_of
            self._identity = self.executor.run(identity_of, write=False, single=True)
        return self._identity

    def identity_on(self, connection: Any) -> Hashable:
        """Which database the caller's DB-API ``connection`` is on, read with this
        engine's statement."""
        return CallerExecutor(self.executor, connection).run(self.engine.queries.identity_of)

    def close(self) -> None:
        """Close every pooled connection (the database stays usable: see Executor.close)."""
        self.executor.close()


class StoreRunner(Protocol):
    """What a helper working for a store uses of it (:class:`TableStore`'s): one
    transaction per call, and its clock."""

    def _run(
        self, work: Callable[[Tx], T], *, read_only: bool = False, single: bool = False
    ) -> T: ...

    def _now(self) -> int: ...


class QueryRunner(StoreRunner, Protocol):
    """A :class:`StoreRunner` with its engine's named statements (``q``): what the
    topology and the operator's verbs use of a :class:`~.store.JobStore`."""

    q: Queries


class TableStore:
    """Base of the stores: one transaction per call, tables made ready once, one clock.

    ``database``: a URL (the store opens it and closes it with itself) or an open
    :class:`Database` shared with other stores (closed by its opener).
    """

    def __init__(self, database: str | Database, options: StoreOptions | None = None) -> None:
        if isinstance(database, Database) and options is not None:
            raise ConfigurationError(
                "a store opened on a shared Database takes that Database's options; "
                "give them to Database(url, options)"
            )
        self._owns_database = not isinstance(database, Database)
        self.database = database if isinstance(database, Database) else Database(database, options)
        self.options = self.database.options
        self.engine = self.database.engine
        self.url = self.database.url
        self._db = self.database.db
        self._exec = self.database.executor
        #: Unix-seconds clock; every operation reads it once. Tests may replace it.
        self.clock: Callable[[], float] = time.time
        self._ready = False
        self._ready_lock = threading.Lock()
        #: Runs a transaction's work: the executor's, or (:meth:`joined`) the caller's.
        self._runner: Callable[..., Any] = self._exec.run
        #: True in a view :meth:`joined` made: its writes are the caller's transaction's.
        self.joined_view = False

    def joined(self, enlistment: Enlistment) -> Self | None:
        """This store, its verbs writing in ``enlistment``'s transaction (``enlist``); None
        when there is no transaction to join (the publish is written as usual).

        The tables are made ready on the store's own connection first (outside the
        caller's transaction), and the caller's connection must be to this database:
        :class:`WrongDatabase` otherwise, before anything is written."""
        connection = enlistment.connection()
        if connection is None:
            return None
        self.ensure_ready()
        wrong = WrongDatabase(
            f"the connection given to enlist() is not to the broker's database "
            f"({self.url.render_as_string(hide_password=True)}): nothing was written; "
            "enlist a connection to that database, or publish outside enlist()"
        )
        driver = type(connection).__module__.partition(".")[0]
        if driver not in self.engine.dbapi_modules:
            raise wrong  # another engine's driver: not one statement of ours sent to it
        lasting = self.engine.queries.identity_lasts
        theirs = enlistment.identity(connection, self.database.identity_on, lasting=lasting)
        if theirs != self.database.identity() and theirs != self.database.identity(again=True):
            raise wrong  # (read ours again first: a restart or failover changes it)
        view = copy.copy(self)
        view._runner = CallerExecutor(self._exec, connection).run
        view.joined_view = True
        return view

    def _run(self, work: Callable[[Tx], T], *, read_only: bool = False, single: bool = False) -> T:
        """Run ``work`` in one transaction, making the tables ready first if needed.

        ``single``: ``work`` runs exactly one statement (see ``ServerEngine``).
        """
        if not self._ready:
            self.ensure_ready()
        return self._runner(work, write=not read_only, single=single)  # type: ignore[no-any-return]

    def _now(self) -> int:
        return int(self.clock())

    def check_payload_size(self, size: int) -> None:
        """Raise :class:`MessageTooLarge` for a payload of ``size`` bytes that the database
        would refuse (at once, naming the limit, instead of a failed statement)."""
        self.ensure_ready()  # a server engine learns its limit on connecting
        limit = self.engine.max_payload_bytes
        if size > limit:
            raise MessageTooLarge(
                f"a message of {size:,} bytes is larger than {limit:,} bytes, the most "
                f"database {self._exec.describe} takes in one message: "
                f"{self.engine.payload_limit_hint()}; nothing was stored"
            )

    # -- schema -------------------------------------------------------------------

    def ensure_ready(self) -> None:
        """Connect, and create (or, with ``create_tables=False``, verify) the tables, once."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            try:
                # A read first: tables other processes made need no write (and no lock an
                # application's open transaction, a publish may be enlisted in, holds).
                self.verify_schema()
            except SchemaMismatch as exc:
                if not self.options.create_tables:
                    raise
                enlisted = active(self.options.django_atomic)
                if self.engine.single_writer and enlisted and enlisted.connection() is not None:
                    # Creating them would wait for the lock the caller's transaction holds.
                    raise SchemaMismatch(
                        f"{exc}; the queue's tables cannot be created or changed inside "
                        "the transaction this publish is enlisted in (SQLite has one writer "
                        "at a time, and it is yours): create them first, with "
                        "`kombu-sqlqueue create-tables URL` or by starting a worker"
                    ) from exc
                self.create_schema()
            self._ready = True

    def create_schema(self) -> None:
        """Create this store's tables if absent, then verify them (idempotent, safe from
        many processes at once)."""
        raise NotImplementedError

    def table_specs(self) -> Sequence[TableSpec]:
        """The tables this store uses and the columns it reads."""
        raise NotImplementedError

    def verify_schema(self) -> None:
        """Raise :class:`SchemaMismatch` unless every table has every column we use."""
        with self._exec.sa_errors(), self._db.connect() as conn:
            inspector = sa.inspect(conn.execution_options(**{READ_ONLY: True}))
            for spec in self.table_specs():
                if not inspector.has_table(spec.name):
                    raise SchemaMismatch(f"table {spec.name} does not exist; {spec.create_hint}")
                present = {c["name"] for c in inspector.get_columns(spec.name)}
                missing = [c for c in spec.columns if c not in present]
                if missing:
                    raise SchemaMismatch(f"table {spec.name} lacks columns: {', '.join(missing)}")

    def close(self) -> None:
        """Close the pooled connections of a database this store opened."""
        if self._owns_database:
            self.database.close()


def schema_ddl(url: str, metadata: sa.MetaData | None = None) -> list[str]:
    """The statements that create ``metadata``'s tables (None: contract v1's and ours) on
    ``url``'s engine, for a DBA who applies schema by hand. Nothing connects to the
    database."""
    engine_cls, parsed = parse_store_url(url)
    if metadata is None:
        metadata = engine_cls.queries().metadata
    statements: list[str] = []

    def record(sql: sa.schema.ExecutableDDLElement, *_args: object, **_kw: object) -> None:
        text = str(sql.compile(dialect=mock.dialect)).strip()
        statements.append("\n".join(line.rstrip() for line in text.splitlines()) + ";")

    mock = sa.create_mock_engine(parsed, record)
    metadata.create_all(mock, checkfirst=False)
    return statements
