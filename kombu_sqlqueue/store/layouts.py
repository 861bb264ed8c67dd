"""Table layouts other packages add: their tables, as an operator reaches them.

Contract v1's tables (layout ``askr``) are this package's own. Another layout (another
runtime's queue tables, with its rules) lives in the package that knows it and is found
by name through the entry-point group :data:`ENTRY_POINT_GROUP`, as queue formats are:
the object it names satisfies :class:`TableLayout`. The operator's CLI, the metrics
exporter and the job summaries reach a layout only through it, so nothing here knows
any layout but contract v1's.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol

from ..exceptions import ConfigurationError
from .admin import QueueAdmin
from .database import StoreOptions

#: The entry-point group a package registers a table layout under (its name: the layout's).
ENTRY_POINT_GROUP = "kombu_sqlqueue.layouts"

#: Contract v1's tables: this package's own layout, never an entry point.
CONTRACT_LAYOUT = "askr"


@dataclass(frozen=True, slots=True)
class LayoutSettings:
    """What an operator says of a layout's tables (the CLI's ``--jobs-table``,
    ``--failed-table``, ``--retry-after``, ``--connection``, ``--cache-table``,
    ``--cache-prefix``); None: the layout's own default."""

    jobs_table: str | None = None
    failed_table: str | None = None
    #: Seconds after which a reservation counts as lapsed, for a layout whose table
    #: records when a job was reserved rather than until when.
    retry_after: float | None = None
    #: The connection a layout's queues belong to (Laravel's queue connection name).
    connection: str | None = None
    #: Where a layout keeps a queue's pause, and how its keys start (Laravel's database
    #: cache store's table and ``cache.prefix``).
    cache_table: str | None = None
    cache_prefix: str | None = None


_SHORT = reprlib.Repr()
_SHORT.maxstring = 40
_SHORT.maxother = 40
_SHORT.maxlevel = 3
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = 6


def short(value: Any) -> str:
    """``repr(value)``, abbreviated (a summary's detail)."""
    return _SHORT.repr(value)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A stored job as a person reads it. ``kind``: ``celery``, ``kombu``, a layout's own
    kind, or ``unreadable``; ``name``: the task or class; ``detail``: its arguments (or
    content type and body; or why it is unreadable)."""

    kind: str
    name: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail}


class TableLayout(Protocol):
    """A table layout a package registers (see the module docstring)."""

    #: The name ``--layout`` takes (the entry point's).
    name: str
    #: One line for ``--help``: whose tables these are.
    description: str
    #: The package's exception classes an operator's command shows as one line.
    errors: tuple[type[Exception], ...]

    def open_admin(self, url: str, settings: LayoutSettings, options: StoreOptions) -> QueueAdmin:
        """The operator's verbs on the tables at ``url`` (a SQLAlchemy URL); with
        ``options.create_tables`` false, verified and never created."""
        ...

    def create_tables(self, url: str, settings: LayoutSettings) -> str:
        """Create the tables if absent (idempotent); return the line telling what is ready."""
        ...

    def ddl(self, url: str, settings: LayoutSettings) -> list[str]:
        """The statements that create the tables on ``url``'s engine (connects to nothing)."""
        ...

    def summarize(self, payload: bytes | str) -> JobSummary:
        """What ``payload`` (a stored row's) runs; ``kind`` ``unreadable`` when it is not
        this layout's. Never raises."""
        ...


_loaded: dict[str, TableLayout] = {}


def layout_names() -> list[str]:
    """Every layout there is: contract v1's, then those installed, by name."""
    found = sorted({e.name for e in entry_points(group=ENTRY_POINT_GROUP)} - {CONTRACT_LAYOUT})
    return [CONTRACT_LAYOUT, *found]


def table_layout(name: str) -> TableLayout:
    """The installed layout ``name`` (not :data:`CONTRACT_LAYOUT`, which is built in);
    :class:`ConfigurationError` saying what is installed when none is."""
    found = _loaded.get(name)
    if found is not None:
        return found
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            layout: TableLayout = entry.load()
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"table layout {name!r} is registered ({entry.value}) but cannot be loaded: "
                f"{exc}; reinstall the package that provides it"
            ) from exc
        _loaded[name] = layout
        return layout
    raise ConfigurationError(
        f"no installed package provides the table layout {name!r}: installed layouts are "
        f"{', '.join(layout_names())}; a layout comes with the package that knows its tables "
        f"(an entry point of group {ENTRY_POINT_GROUP}): install that package"
    )


def loaded_layouts() -> list[TableLayout]:
    """The layouts this process has loaded so far."""
    return list(_loaded.values())


def installed_layouts() -> list[TableLayout]:
    """Every installed layout but contract v1's, loaded (those that cannot load left out)."""
    found: list[TableLayout] = []
    for name in layout_names()[1:]:
        try:
            found.append(table_layout(name))
        except ConfigurationError:
            continue
    return found
