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
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._version import __version__
from ..exceptions import (
    ConfigurationError,
    InvalidQueueName,
    SchemaMismatch,
    SqlQueueError,
    StoreError,
)
from ..ops.connect import open_admin
from ..ops.summary import JobSummary, summarize
from ..store.admin import FailedJob, QueueAdmin, QueueStats, WaitingJob
from ..store.layouts import CONTRACT_LAYOUT, LayoutSettings, installed_layouts, loaded_layouts
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
            return LayoutView(layout, admin.tables, admin.stats())
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
    headline = (job.exception or "").strip().splitlines()[:1]
    return FailedView(job, summary, summary.detail[:DETAIL_CHARS], (headline or [""])[0][:300])


#: Where an action sends the browser back to: a route's name, its path parameters and its
#: query parameters.
Back = tuple[str, dict[str, str], dict[str, str]]


@dataclass(frozen=True, slots=True)
class Action:
    """A state-changing verb of the page: what it asks before, and what it does (an
    operator's verb of the layout's admin, as the CLI's) — what it says, and where to go."""

    question: str
    run: Callable[[QueueAdmin, str, str], tuple[str, Back]]


def exact_failed(admin: QueueAdmin, ref: str) -> FailedJob:
    """The failed job ``ref`` names: the row of that id when ``ref`` is a number (the
    page's own links, which a producer's uuid "4" must not hijack), else the one of that
    uuid."""
    found = admin.find_failed(ref)
    if ref.isdigit():
        found = [job for job in found if job.id == int(ref)]
    else:
        found = [job for job in found if job.uuid == ref]
    if not found:
        raise HTTPException(404, f"no failed job {ref!r}")
    return found[0]


def _failed_id(admin: QueueAdmin, ref: str) -> int:
    return exact_failed(admin, ref).id


def _purge(admin: QueueAdmin, layout: str, queue: str) -> tuple[str, Back]:
    n = admin.purge(queue)
    # To the overview: a queue purged of every job may be no queue any more.
    return f"purged {n} job(s) of queue {queue!r}", ("overview", {}, {})


def _pause(admin: QueueAdmin, layout: str, queue: str) -> tuple[str, Back]:
    admin.pause(queue)
    return f"paused queue {queue!r} until resumed", ("queue", {}, {"layout": layout, "name": queue})


def _resume(admin: QueueAdmin, layout: str, queue: str) -> tuple[str, Back]:
    said = f"resumed queue {queue!r}" if admin.resume(queue) else f"queue {queue!r} was not paused"
    return said, ("queue", {}, {"layout": layout, "name": queue})


def _retry(admin: QueueAdmin, layout: str, ref: str) -> tuple[str, Back]:
    n = admin.retry_failed([_failed_id(admin, ref)])
    return f"retried {n} failed job(s): back on the queue", ("failed", {"layout": layout}, {})


def _forget(admin: QueueAdmin, layout: str, ref: str) -> tuple[str, Back]:
    n = admin.forget_failed([_failed_id(admin, ref)])
    return f"forgot {n} failed job(s)", ("failed", {"layout": layout}, {})


#: The page's actions, by name (``/actions/<name>``: GET asks, POST does).
ACTIONS: dict[str, Action] = {
    "purge": Action("Delete the jobs of queue {target} ({layout}) no one holds?", _purge),
    "pause": Action("Pause queue {target} ({layout}) for every worker?", _pause),
    "resume": Action("Resume queue {target} ({layout})?", _resume),
    "retry": Action(
        "Put failed job {target} ({layout}) back on its queue, its attempts reset?", _retry
    ),
    "forget": Action("Delete failed job {target} ({layout}) for good?", _forget),
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
            **context,
        )
        return HTMLResponse(page, status_code=status)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html")
        form = await request.form()
        if not guard.token_matches(str(form.get("token", ""))):
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
        target = str(params.get("target", ""))
        if layout not in admins.layouts or not target:
            raise HTTPException(404, "an action needs a layout and what it acts on")
        if request.method == "GET":
            return render(
                request, "confirm.html", action=name, layout=layout, target=target,
                question=found.question.format(target=target, layout=layout),
            )  # fmt: skip
        refused = guard.refusal(request, str(params.get(CSRF_FIELD, "")))
        if refused is not None:
            return render(request, "error.html", status=403, message=refused, title="Refused")

        def run() -> tuple[str, Back]:
            with admins.admin(layout) as admin:
                return found.run(admin, layout, target)

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
        try:
            with admins.admin(layout) as admin:
                known = admin.is_known(queue)  # (checks the name first)
                stats = next((s for s in admin.stats() if s.queue == queue), None)
                if not known and stats is None:  # no job, no failed job, no control
                    raise HTTPException(404, f"no queue {queue!r} in the {layout} tables")
                waiting = admin.peek(queue, PAGE_JOBS)
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
            now=int(time.time()),
        )

    def layout_of(request: Request) -> str:
        layout = str(request.path_params["layout"])
        if layout not in admins.layouts:
            raise HTTPException(404, f"no table layout {layout!r}")
        return layout

    def failed_page(request: Request) -> Response:
        layout = layout_of(request)
        queue = request.query_params.get("queue") or None
        try:
            with admins.admin(layout) as admin:
                rows = admin.failed(queue, PAGE_JOBS)
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
            rows=[failed_view(job, layout) for job in rows],
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
        raw = stored_bytes(job.payload)
        return Response(
            raw,
            media_type="application/octet-stream",
            headers={
                "Content-Disposition": f'attachment; filename="failed-{job.id}.bin"',
                "X-Content-Type-Options": "nosniff",
            },
        )

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
            Route("/failed/{layout}", failed_page, name="failed"),
            Route("/failed/{layout}/{ref}", failed_detail, name="failed_job"),
            Route("/failed/{layout}/{ref}/raw", failed_raw, name="failed_raw"),
            Route("/login", login, name="login", methods=["GET", "POST"]),
            Route("/logout", logout, name="logout", methods=["POST"]),
            Route("/actions/{action}", action, name="action", methods=["GET", "POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={HTTPException: not_found},
        lifespan=lambda _app: _closing(admins),
    )
    # A host that mounts the app runs its own lifespan, not this one: it closes the
    # dashboard's connections with app.state.close() at its shutdown.
    app.state.close = admins.close
    return app


@asynccontextmanager
async def _closing(admins: Admins) -> AsyncIterator[None]:
    """The app's lifespan: its connections are closed when the server stops."""
    try:
        yield
    finally:
        admins.close()


def _held(admin: QueueAdmin, queue: str) -> list[WaitingJob] | None:
    """The queue's held jobs with their holders; None where the layout records no holder
    (its ``held`` refuses with :class:`ConfigurationError`, as ``QueueAdmin.held`` says)."""
    try:
        return admin.held(queue, PAGE_JOBS)
    except ConfigurationError:
        return None
