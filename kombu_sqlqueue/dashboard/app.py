"""The dashboard: every queue of every table layout in one database, on one page.

An ASGI app (Starlette): ``kombu-sqlqueue dashboard URL`` serves it with uvicorn, and a
Django, FastAPI or Flask project mounts :func:`create_app`'s app under a path of its own
(docs/dashboard.md). Everything it shows is read through the operator's verbs
(:class:`~kombu_sqlqueue.store.admin.QueueAdmin`, the ones the CLI calls): no SQL of its own.
Every stored value is rendered escaped (Jinja2's autoescape): a payload or a queue name is
text, whatever it holds. A database that cannot be read is a banner on the page, not an
error page, and the next refresh tries again.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._version import __version__
from ..exceptions import (
    ConfigurationError,
    InvalidControl,
    InvalidQueueName,
    SchemaMismatch,
    SqlQueueError,
    StoreError,
)
from ..ops.connect import open_admin
from ..ops.summary import JobSummary, summarize
from ..store.admin import (
    FailedJob,
    PeekAfter,
    QueueAdmin,
    QueueStats,
    WaitingJob,
    held_queues,
    holders_by_queue,
)
from ..store.controls import check_concurrency, check_rate, parse_rate
from ..store.layouts import CONTRACT_LAYOUT, LayoutSettings, installed_layouts, loaded_layouts
from .sampler import Sampler
from .security import CSRF_FIELD, SESSION_COOKIE, Guard, SecurityHeaders

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
#: How often the overview refreshes itself (htmx polls its fragment).
REFRESH_SECONDS = 2
#: The most characters of a job's summary a page shows (the rest: the raw bytes' page).
DETAIL_CHARS = 2000
#: How many jobs a queue's page lists (next and held each).
PAGE_JOBS = 50
#: The most characters of a stored payload or traceback a page shows (the whole: the raw
#: bytes' download).
RAW_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class LayoutView:
    """What one table layout holds: its queues, or why it could not be read."""

    layout: str
    tables: tuple[str, str] = ("", "")
    queues: list[QueueStats] = field(default_factory=list)
    #: The tables are not there (the layout is not used in this database): not an error.
    absent: bool = False
    #: Why the tables could not be read now (the database down…); None: they were.
    error: str | None = None


class Admins:
    """One :class:`QueueAdmin` per layout, opened on first use and again after a database
    error (a database that was down is tried again at the next request)."""

    #: Seconds a layout whose tables were missing is taken as still missing (an overview
    #: polled every 2 s does not inspect the schema each time).
    ABSENT_SECONDS = 10.0

    def __init__(self, url: str, settings: LayoutSettings) -> None:
        self.url = url
        self.settings = settings
        #: Contract v1's and every installed layout's, read once (entry points).
        self.layouts = [CONTRACT_LAYOUT, *(layout.name for layout in installed_layouts())]
        self._open: dict[str, QueueAdmin] = {}
        #: layout -> until when its tables are taken as missing, and what was said. The
        #: message, not the exception: its traceback would keep the failed open's
        #: connections alive.
        self._absent: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def _get(self, layout: str) -> QueueAdmin:
        with self._lock:
            admin = self._open.get(layout)
            absent = self._absent.get(layout)
        if admin is not None:
            return admin
        if absent is not None and time.monotonic() < absent[0]:
            raise SchemaMismatch(absent[1])
        try:
            # Opened outside the lock: a database slow to answer holds up only its callers.
            opened = open_admin(self.url, layout, self.settings)
        except SchemaMismatch as exc:
            with self._lock:
                self._absent[layout] = (time.monotonic() + self.ABSENT_SECONDS, str(exc))
            raise
        with self._lock:
            self._absent.pop(layout, None)
            admin = self._open.setdefault(layout, opened)
        if admin is not opened:  # another request opened it meanwhile
            opened.close()
        return admin

    @contextmanager
    def admin(self, layout: str) -> Iterator[QueueAdmin]:
        """The layout's admin; dropped (closed) when a use of it meets a database error,
        so the next use opens it afresh (a 404 or a refused name keeps it)."""
        admin = self._get(layout)
        try:
            yield admin
        except StoreError:  # the database's (a connection, a table): not a name's or a 404
            with self._lock:
                if self._open.get(layout) is admin:
                    del self._open[layout]
            admin.close()
            raise

    def close(self) -> None:
        with self._lock:
            for admin in self._open.values():
                admin.close()
            self._open.clear()
            self._absent.clear()


def _errors() -> tuple[type[Exception], ...]:
    """The exceptions a read of a layout's tables may raise that are the database's or
    the tables' (ours and the layouts'), shown as a banner."""
    return (SqlQueueError, *(error for layout in loaded_layouts() for error in layout.errors))


def read_layout(admins: Admins, layout: str) -> LayoutView:
    """``layout``'s queues (stats, holders), or why not."""
    try:
        with admins.admin(layout) as admin:
            stats = admin.stats()
            held = holders_by_queue(admin.holders(held_queues(stats)))
            queues = [replace(row, holders=held.get(row.queue, {})) for row in stats]
            return LayoutView(layout, admin.tables, queues)
    except SchemaMismatch:
        return LayoutView(layout, absent=True)
    except _errors() as exc:
        logger.warning("dashboard: could not read the %s tables: %s", layout, exc)
        return LayoutView(layout, error=str(exc))


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as a queue's page lists it."""

    job: WaitingJob
    summary: JobSummary
    detail: str
    truncated: bool


def job_view(job: WaitingJob, layout: str) -> JobView:
    summary = summarize(job.payload, layout)
    detail = summary.detail
    return JobView(job, summary, detail[:DETAIL_CHARS], len(detail) > DETAIL_CHARS)


@dataclass(frozen=True, slots=True)
class FailedView:
    """A dead letter as the failed jobs' page lists it."""

    job: FailedJob
    summary: JobSummary
    detail: str
    #: The exception's first line (its type and message; the traceback is on its page).
    headline: str


def failed_view(job: FailedJob, layout: str) -> FailedView:
    summary = summarize(job.payload, layout)
    return FailedView(job, summary, summary.detail[:DETAIL_CHARS], headline_of(job.exception))


def headline_of(exception: str | None) -> str:
    """An exception's one line for a list: Laravel's first (``Class: message in file:line``);
    of a Python traceback the last unindented one (the type and message, which Python
    prints after the frames)."""
    lines = [line for line in (exception or "").strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last)"):
        last = [line for line in lines if not line[:1].isspace()]
        lines = last[-1:] or lines
    return (lines or [""])[0][:300]


#: The most failed jobs one page with a search reads (newest first, keyset batches): a
#: search never reads the whole table in one request; "older" goes on below.
SEARCH_SCAN = 5000


def failed_rows(
    admin: QueueAdmin, layout: str, queue: str | None, before: int | None, search: str
) -> tuple[list[FailedView], int | None]:
    """A page of failed jobs below ``before`` (None: the newest) and where the next page
    starts (None: no older row). With ``search``, only the ones whose task or class name
    or exception holds it (case-insensitive, in the decoded payload — what the list
    shows, not the stored bytes), reading at most :data:`SEARCH_SCAN` rows."""
    if not search:
        # One row past the page says whether an older page exists (exactly a page left
        # would otherwise link to an empty one). Keyset pagination: the next page starts
        # below this page's last id.
        rows = admin.failed(queue, PAGE_JOBS + 1, before)
        page = rows[:PAGE_JOBS]
        return [failed_view(job, layout) for job in page], (
            page[-1].id if len(rows) > PAGE_JOBS else None
        )
    wanted, found, read = search.casefold(), list[FailedView](), 0
    while read < SEARCH_SCAN:
        rows = admin.failed(queue, min(500, SEARCH_SCAN - read), before)
        for job in rows:
            read += 1
            before = job.id
            view = failed_view(job, layout)
            if wanted in view.summary.name.casefold() or wanted in (job.exception or "").casefold():
                found.append(view)
                if len(found) == PAGE_JOBS:
                    return found, job.id
        if len(rows) < 500:
            return found, None  # the oldest row was read
    return found, before


#: Where an action sends the browser back to: a route's name, its path parameters and its
#: query parameters.
Back = tuple[str, dict[str, str], dict[str, str]]


def is_row_id(text: str) -> bool:
    """A row id as a link or form gives it: ASCII digits, at most 18 (``str.isdigit``
    takes "²", and a longer number overflows a 64-bit column)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def exact_failed(admin: QueueAdmin, ref: str) -> FailedJob:
    """The failed job ``ref`` names: the row of that id when ``ref`` is a number (the
    page's own links, which a producer's uuid "4" must not hijack), else the one of that
    uuid."""
    found = admin.find_failed(ref)
    if is_row_id(ref):
        found = [job for job in found if job.id == int(ref)]
    else:
        found = [job for job in found if job.uuid == ref]
    if not found:
        raise HTTPException(404, f"no failed job {ref!r}")
    return found[0]


@dataclass(frozen=True, slots=True)
class Asked:
    """What an action is asked to act on: the layout, its target (a queue, failed job ids,
    a holder) and the action's own fields (as the form sent them)."""

    layout: str
    target: str
    fields: dict[str, str]

    def back_to_queue(self, queue: str) -> Back:
        return ("queue", {}, {"layout": self.layout, "name": queue})

    def back_to_failed(self) -> Back:
        return ("failed", {"layout": self.layout}, {})


#: The most failed jobs one "selected" action names (a page lists fewer).
MOST_SELECTED = 500


def failed_ids(admin: QueueAdmin, target: str) -> list[int]:
    """The failed jobs a retry or forget names: row ids separated by commas (the list's
    selection, a job's page), or one uuid."""
    pieces = target.split(",")
    if all(is_row_id(piece) for piece in pieces) and len(pieces) <= MOST_SELECTED:
        return sorted({int(piece) for piece in pieces})
    return [exact_failed(admin, target).id]


def failed_scope(target: str) -> str | None:
    """``all`` (every queue: None) or ``queue:NAME`` — what retry-all and flush act on."""
    if target == "all":
        return None
    if target.startswith("queue:") and len(target) > len("queue:"):
        return target[len("queue:") :]
    raise HTTPException(404, f"acts on 'all' or 'queue:NAME', not {target!r}")


def describe_scope(target: str) -> str:
    queue = failed_scope(target)
    return "every queue" if queue is None else f"queue {queue!r}"


def _purge(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    n = admin.purge(asked.target)
    # To the overview: a queue purged of every job may be no queue any more.
    return f"purged {n} job(s) of queue {asked.target!r}", ("overview", {}, {})


def _pause(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    admin.pause(asked.target)
    return f"paused queue {asked.target!r} until resumed", asked.back_to_queue(asked.target)


def _resume(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    queue = asked.target
    said = f"resumed queue {queue!r}" if admin.resume(queue) else f"queue {queue!r} was not paused"
    return said, asked.back_to_queue(queue)


def _limit_value(text: str, parse: Callable[[str], Any], what: str) -> Any:
    """A limit as the form gives it: empty or ``off`` is none; else parsed (the store
    checks the value, as for the CLI)."""
    text = text.strip()
    if text.lower() in ("", "off"):
        return None
    try:
        return parse(text)
    except InvalidControl:
        raise
    except ValueError as exc:
        raise InvalidControl(f"{what} takes a whole number or nothing, got {text!r}") from exc


def _limits(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    queue, fields = asked.target, asked.fields
    # Every value read before any is written: a bad one changes nothing (as the CLI).
    concurrency = _limit_value(fields.get("concurrency", ""), int, "concurrency")
    burst = _limit_value(fields.get("burst", ""), int, "burst")
    burst = 1 if burst is None else burst  # (0 is the store's to refuse, not a default)
    rate = _limit_value(fields.get("rate", ""), lambda text: parse_rate(text, burst), "rate")
    per_key = _limit_value(fields.get("per_key", ""), int, "per key")
    # The store's own checks, all before any write (each verb checks only its own value:
    # a bad per-key limit after a written concurrency would half-apply the form).
    for value in (concurrency, per_key):
        if value is not None:
            check_concurrency(queue, value)
    if rate is not None:
        check_rate(rate)
    admin.limit(queue, concurrency)
    admin.rate_limit(queue, rate)
    admin.key_limit(queue, per_key)
    return f"limits of queue {queue!r}: {describe_limits(asked)}", asked.back_to_queue(queue)


def describe_limits(asked: Asked) -> str:
    said = []
    for field_name, what in (
        ("concurrency", "held at once"),
        ("rate", "rate"),
        ("per_key", "per key"),
    ):
        value = asked.fields.get(field_name, "").strip()
        burst = asked.fields.get("burst", "").strip()
        if field_name == "rate" and value and burst not in ("", "1"):
            value = f"{value} (burst {burst})"
        said.append(f"{what} {value}" if value and value.lower() != "off" else f"no {what} limit")
    return ", ".join(said)


def _release(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    queue = asked.fields.get("queue") or None
    n = admin.release_holder(asked.target, queue)
    said = f"released {n} job(s) held by {asked.target!r}: ready again"
    return said, ("overview", {}, {}) if queue is None else asked.back_to_queue(queue)


def _retry(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    n = admin.retry_failed(failed_ids(admin, asked.target))
    if not n:  # nothing changed: none of them is a failed job (any more)
        raise HTTPException(404, f"no failed job {asked.target!r}")
    return f"retried {n} failed job(s): back on the queue", asked.back_to_failed()


def _forget(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    n = admin.forget_failed(failed_ids(admin, asked.target))
    if not n:
        raise HTTPException(404, f"no failed job {asked.target!r}")
    return f"forgot {n} failed job(s)", asked.back_to_failed()


def _retry_all(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    queue = failed_scope(asked.target)
    n = admin.retry_failed(admin.failed_ids(queue))
    return f"retried {n} failed job(s) of {describe_scope(asked.target)}", asked.back_to_failed()


def _flush(admin: QueueAdmin, asked: Asked) -> tuple[str, Back]:
    n = admin.flush_failed(None, failed_scope(asked.target))
    return f"flushed {n} failed job(s) of {describe_scope(asked.target)}", asked.back_to_failed()


@dataclass(frozen=True, slots=True)
class Action:
    """A state-changing verb of the page: what it asks before, and what it does (an
    operator's verb of the layout's admin, as the CLI's) — what it says, and where to go."""

    ask: Callable[[Asked], str]
    run: Callable[[QueueAdmin, Asked], tuple[str, Back]]
    #: The form fields it takes beside the layout and the target.
    fields: tuple[str, ...] = ()


#: The page's actions, by name (``/actions/<name>``: GET asks, POST does).
ACTIONS: dict[str, Action] = {
    "purge": Action(
        lambda a: f"Delete the jobs of queue {a.target} ({a.layout}) no one holds?", _purge
    ),
    "pause": Action(lambda a: f"Pause queue {a.target} ({a.layout}) for every worker?", _pause),
    "resume": Action(lambda a: f"Resume queue {a.target} ({a.layout})?", _resume),
    "limits": Action(
        lambda a: f"Set the limits of queue {a.target} ({a.layout}): {describe_limits(a)}?",
        _limits,
        ("concurrency", "rate", "burst", "per_key"),
    ),
    "release": Action(
        lambda a: (
            f"Hand back every job {a.target} holds"
            + (f" of queue {a.fields['queue']}" if a.fields.get("queue") else "")
            + f" ({a.layout}), for other workers to run?"
        ),
        _release,
        ("queue",),
    ),
    "retry": Action(
        lambda a: f"Put failed job(s) {a.target} ({a.layout}) back on their queue, attempts reset?",
        _retry,
    ),
    "forget": Action(lambda a: f"Delete failed job(s) {a.target} ({a.layout}) for good?", _forget),
    "retry_all": Action(
        lambda a: (
            f"Put every failed job of {describe_scope(a.target)} ({a.layout}) back on its queue?"
        ),
        _retry_all,
    ),
    "flush": Action(
        lambda a: f"Delete every failed job of {describe_scope(a.target)} ({a.layout}) for good?",
        _flush,
    ),
}


def stored_bytes(payload: bytes | str) -> bytes:
    """A payload as the table holds it (a layout that reads text hands back a str whose
    undecodable bytes are escaped: they are put back)."""
    if isinstance(payload, str):
        try:
            return payload.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate that was text, not an escaped byte
            return payload.encode("utf-8", "surrogatepass")
    return bytes(payload)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = lambda unix: (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix)) if unix else "-"
    )
    return env


def create_app(
    url: str,
    *,
    settings: LayoutSettings | None = None,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The dashboard of the database at ``url`` (a broker URL or an SQLAlchemy one), as an
    ASGI app. ``settings``: another layout's table names (the CLI's ``--jobs-table`` …).
    ``token``: what state-changing actions need; without one the page is read-only and
    says so. ``allowed_hosts``: the ``Host`` names it answers (a page of another site
    whose name resolves to 127.0.0.1 — DNS rebinding — reads nothing); None: every one
    (mounted in an app, the app's own host check applies)."""
    admins = Admins(url, settings or LayoutSettings())
    guard = Guard(token)
    env = _environment()

    #: Why a layout's ids issued could not be read, as last logged.
    issued_said: dict[str, str] = {}

    def read_for_plots(layout: str) -> tuple[list[QueueStats], tuple[int, int] | None] | None:
        try:
            with admins.admin(layout) as admin:
                stats = admin.stats()
                try:
                    issued: tuple[int, int] | None = admin.issued()
                except StoreError as exc:
                    # No throughput, the depths still plotted, the admin kept (the
                    # depths just read through it): a role without the sequence's
                    # privilege, a SQLite file whose tables never had a row.
                    said = f"{type(exc).__name__}: {exc}"
                    if issued_said.get(layout) != said:
                        logger.warning(
                            "dashboard: no throughput of the %s tables: %s", layout, said
                        )
                        issued_said[layout] = said
                    issued = None
                else:
                    issued_said.pop(layout, None)
                return stats, issued
        except SchemaMismatch:  # this layout's tables are not here: nothing to plot
            return None

    sampler = Sampler(admins.layouts, read_for_plots)

    def close() -> None:
        sampler.stop()
        admins.close()

    def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session = guard.session_of(request)
        page = env.get_template(name).render(
            request=request,
            url_for=request.url_for,
            version=__version__,
            read_only=guard.read_only,
            signed_in=session is not None,
            csrf=guard.csrf_for(session),
            csrf_field=CSRF_FIELD,
            done=guard.message_of(request.query_params.get("done", "")),
            refresh=REFRESH_SECONDS,
            sample_seconds=int(sampler.every),
            **context,
        )
        return HTMLResponse(page, status_code=status)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html")
        form = await request.form()
        client = request.client.host if request.client else "-"
        wait = guard.sign_in_wait(client)
        if wait:
            return render(
                request, "login.html", status=429,
                error=f"Too many wrong tokens: try again in {math.ceil(wait)} s.",
            )  # fmt: skip
        if not guard.token_matches(str(form.get("token", ""))):
            guard.sign_in_failed(client)
            return render(request, "login.html", status=403, error="That is not the token.")
        response = RedirectResponse(request.url_for("overview"), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            guard.new_session(),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=request.scope.get("root_path") or "/",
        )
        return response

    async def logout(request: Request) -> Response:
        response = RedirectResponse(request.url_for("overview"), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=request.scope.get("root_path") or "/")
        return response

    async def action(request: Request) -> Response:
        name = str(request.path_params["action"])
        found = ACTIONS.get(name)
        if found is None:
            raise HTTPException(404, f"no action {name!r}")
        params = request.query_params if request.method == "GET" else await request.form()
        layout = str(params.get("layout", ""))
        # A selection (checkboxes) sends the target once per row: one comma-separated list.
        target = ",".join(str(value) for value in params.getlist("target") if value)
        if layout not in admins.layouts or not target:
            raise HTTPException(404, "an action needs a layout and what it acts on")
        asked = Asked(layout, target, {f: str(params.get(f, "")) for f in found.fields})
        if request.method == "GET":
            return render(
                request, "confirm.html", action=name, asked=asked, question=found.ask(asked)
            )
        refused = guard.refusal(request, str(params.get(CSRF_FIELD, "")))
        if refused is not None:
            return render(request, "error.html", status=403, message=refused, title="Refused")

        def run() -> tuple[str, Back]:
            with admins.admin(layout) as admin:
                return found.run(admin, asked)

        try:
            # The database's work off the event loop (the page handlers are sync: Starlette
            # runs those in its thread pool already).
            said, back = await run_in_threadpool(run)
        except InvalidQueueName as exc:
            raise HTTPException(404, str(exc)) from exc
        except _errors() as exc:
            return render(request, "error.html", status=400, message=str(exc), title="Not done")
        route, path, query = back
        where = request.url_for(route, **path).include_query_params(
            **query, done=guard.signed_message(said)
        )
        return RedirectResponse(str(where), status_code=303)

    def series(request: Request) -> Response:
        """A plot's columns (numbers only: the page draws them with uPlot)."""
        layout = request.query_params.get("layout", "")
        queue = request.query_params.get("name") or None
        if layout not in admins.layouts:
            raise HTTPException(404, f"no table layout {layout!r}")
        sampler.start()  # the first plot asked starts the sampling
        return JSONResponse({"every": sampler.every, **sampler.series(layout, queue)})

    def overview_context() -> dict[str, Any]:
        views = [read_layout(admins, layout) for layout in admins.layouts]
        return {"views": views, "now": int(time.time())}

    def overview(request: Request) -> Response:
        return render(request, "overview.html", **overview_context())

    def overview_fragment(request: Request) -> Response:
        return render(request, "_overview.html", **overview_context())

    def queue_page(request: Request) -> Response:
        # The queue in the query string, never the path: a stored name holding "?", "#",
        # "%" or "/../" cannot make its link another page.
        layout = request.query_params.get("layout", "")
        queue = request.query_params.get("name", "")
        if layout not in admins.layouts:
            raise HTTPException(404, f"no table layout {layout!r}")
        after_text = request.query_params.get("after", "")
        try:
            after = PeekAfter.parse(after_text) if after_text else None
        except ValueError as exc:
            raise HTTPException(404, str(exc)) from exc
        now = int(time.time())
        try:
            with admins.admin(layout) as admin:
                known = admin.is_known(queue)  # (checks the name first)
                stats = next((s for s in admin.stats() if s.queue == queue), None)
                if not known and stats is None:  # no job, no failed job, no control
                    raise HTTPException(404, f"no queue {queue!r} in the {layout} tables")
                # A page of the next jobs, and one past it: is there a next page (keyset:
                # it starts past this page's last job)?
                waiting = admin.peek(queue, PAGE_JOBS + 1, after)
                more = (
                    str(PeekAfter.of(waiting[PAGE_JOBS - 1], now)) if waiting[PAGE_JOBS:] else None
                )
                del waiting[PAGE_JOBS:]
                held = _held(admin, queue)
        except InvalidQueueName as exc:
            raise HTTPException(404, str(exc)) from exc
        except SchemaMismatch as exc:  # no such tables here: no such queue either
            raise HTTPException(404, f"no {layout} tables in this database: {exc}") from exc
        except _errors() as exc:
            return render(
                request, "queue.html", status=503, layout=layout, queue=queue, error=str(exc)
            )
        return render(
            request,
            "queue.html",
            layout=layout,
            queue=queue,
            stats=stats,
            waiting=[job_view(job, layout) for job in waiting],
            held=None if held is None else [job_view(job, layout) for job in held],
            holders=sorted({job.holder for job in held or () if job.holder}),
            now=now,
            after=after,
            more=more,
        )

    def job_page(request: Request, raw_only: bool = False) -> Response:
        layout = request.query_params.get("layout", "")
        queue = request.query_params.get("name", "")
        ref = request.query_params.get("id", "")
        if layout not in admins.layouts or not is_row_id(ref):
            raise HTTPException(404, "a job is named by a layout, a queue and an id")
        try:
            with admins.admin(layout) as admin:
                job = admin.job(queue, int(ref))
        except InvalidQueueName as exc:
            raise HTTPException(404, str(exc)) from exc
        except SchemaMismatch as exc:
            raise HTTPException(404, f"no {layout} tables in this database: {exc}") from exc
        except _errors() as exc:
            return render(request, "error.html", status=503, message=str(exc), title="Unavailable")
        if job is None:
            raise HTTPException(404, f"no job {ref} in queue {queue!r}: done, or never there")
        raw = stored_bytes(job.payload)
        if raw_only:
            return download(raw, f"job-{job.id}.bin")
        summary = summarize(job.payload, layout)
        return render(
            request,
            "job.html",
            layout=layout,
            queue=queue,
            job=job,
            summary=summary,
            detail=summary.detail[:RAW_CHARS],
            raw=raw[:RAW_CHARS].decode("utf-8", "replace"),
            raw_bytes=len(raw),
            raw_cut=len(raw) > RAW_CHARS,
            now=int(time.time()),
        )

    def job_raw(request: Request) -> Response:
        """A waiting job's stored bytes as they are, to download."""
        return job_page(request, raw_only=True)

    def layout_of(request: Request) -> str:
        layout = str(request.path_params["layout"])
        if layout not in admins.layouts:
            raise HTTPException(404, f"no table layout {layout!r}")
        return layout

    def failed_page(request: Request) -> Response:
        layout = layout_of(request)
        queue = request.query_params.get("queue") or None
        before_text = request.query_params.get("before", "")
        if before_text and not is_row_id(before_text):
            raise HTTPException(404, f"no page before {before_text!r}")
        before = int(before_text) if before_text else None
        search = request.query_params.get("search", "").strip()
        try:
            with admins.admin(layout) as admin:
                views, older = failed_rows(admin, layout, queue, before, search)
        except InvalidQueueName as exc:
            raise HTTPException(404, str(exc)) from exc
        except SchemaMismatch as exc:
            raise HTTPException(404, f"no {layout} tables in this database: {exc}") from exc
        except _errors() as exc:
            return render(request, "failed.html", status=503, layout=layout, error=str(exc))
        return render(
            request,
            "failed.html",
            layout=layout,
            queue=queue,
            search=search,
            before=before,
            rows=views,
            older=older,
            scanned=SEARCH_SCAN if search else None,
        )

    def failed_job(layout: str, ref: str) -> FailedJob:
        try:
            with admins.admin(layout) as admin:
                return exact_failed(admin, ref)
        except SchemaMismatch as exc:
            raise HTTPException(404, f"no {layout} tables in this database: {exc}") from exc

    def failed_detail(request: Request) -> Response:
        layout = layout_of(request)
        try:
            job = failed_job(layout, str(request.path_params["ref"]))
        except _errors() as exc:
            return render(request, "error.html", status=503, message=str(exc), title="Unavailable")
        raw = stored_bytes(job.payload)
        return render(
            request,
            "failed_job.html",
            layout=layout,
            row=failed_view(job, layout),
            exception=(job.exception or "")[:RAW_CHARS],
            raw=raw[:RAW_CHARS].decode("utf-8", "replace"),
            raw_bytes=len(raw),
            raw_cut=len(raw) > RAW_CHARS,
        )

    def failed_raw(request: Request) -> Response:
        """The stored bytes as they are, to download: never rendered as a page."""
        layout = layout_of(request)
        try:
            job = failed_job(layout, str(request.path_params["ref"]))
        except _errors() as exc:
            return render(request, "error.html", status=503, message=str(exc), title="Unavailable")
        return download(stored_bytes(job.payload), f"failed-{job.id}.bin")

    async def not_found(request: Request, exc: Exception) -> Response:
        detail = exc.detail if isinstance(exc, HTTPException) else "not found"
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        return render(request, "error.html", status=status, message=detail, title="Not found")

    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(
        middleware=middleware,
        routes=[
            Route("/", overview, name="overview"),
            Route("/fragments/overview", overview_fragment, name="overview_fragment"),
            Route("/queue", queue_page, name="queue"),
            Route("/series", series, name="series"),
            Route("/job", job_page, name="job"),
            Route("/job/raw", job_raw, name="job_raw"),
            Route("/failed/{layout}", failed_page, name="failed"),
            Route("/failed/{layout}/{ref}", failed_detail, name="failed_job"),
            Route("/failed/{layout}/{ref}/raw", failed_raw, name="failed_raw"),
            Route("/login", login, name="login", methods=["GET", "POST"]),
            Route("/logout", logout, name="logout", methods=["POST"]),
            Route("/actions/{action}", action, name="action", methods=["GET", "POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={HTTPException: not_found},
        lifespan=lambda _app: _closing(close),
    )
    # A host that mounts the app runs its own lifespan, not this one: it closes the
    # dashboard's connections (and stops its sampling) with app.state.close() at its
    # shutdown.
    app.state.close = close
    app.state.sampler = sampler
    return app


def download(raw: bytes, filename: str) -> Response:
    """Stored bytes as they are, to download: never rendered as a page."""
    return Response(
        raw,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "X-Content-Type-Options": "nosniff",
        },
    )


@asynccontextmanager
async def _closing(close: Callable[[], None]) -> AsyncIterator[None]:
    """The app's lifespan: its sampling stops and its connections close with the server."""
    try:
        yield
    finally:
        close()


def _held(admin: QueueAdmin, queue: str) -> list[WaitingJob] | None:
    """The queue's held jobs with their holders; None where the layout records no holder
    (its ``held`` refuses with :class:`ConfigurationError`, as ``QueueAdmin.held`` says)."""
    try:
        return admin.held(queue, PAGE_JOBS)
    except ConfigurationError:
        return None
