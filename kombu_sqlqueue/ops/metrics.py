"""Prometheus metrics of the queues, named as contract v1 names its backlog figures.

:class:`QueueCollector` is a ``prometheus_client`` collector: register it with an app's
own registry (``REGISTRY.register(QueueCollector(open_admin(url)))``), or run
``kombu-sqlqueue metrics URL --port 9808`` (:func:`serve`). Every scrape reads the
tables afresh with one grouped query per table (``QueueAdmin.stats``). Gauges, labelled
by ``queue``:

* ``askr_queue_total``, ``askr_queue_ready``, ``askr_queue_reserved``,
  ``askr_queue_delayed`` — jobs by state (total = ready + reserved + delayed);
* ``askr_queue_oldest_seconds`` — age of the oldest ready job (0 when none is ready);
* ``askr_queue_dead_letters`` — rows in the failed table;
* ``askr_queue_paused`` — 1 while the queue is paused (``kombu-sqlqueue pause``), else 0;
* ``askr_queue_waiting_on_limit`` — ready jobs its limits (concurrency, rate) hold back;
* ``askr_queue_concurrency_limit`` — the limit, for a queue that has one;
* ``askr_queue_rate_limit_per_second`` — its rate limit, for a queue that has one;
* ``askr_queue_key_concurrency_limit`` — its per-key limit, for a queue that has one;

Counters, of the tables: ``askr_jobs_enqueued_total`` and ``askr_jobs_failed_total`` —
the ids the jobs table and the failed table have handed out (``QueueAdmin.issued``, what
the dashboard's throughput plots read): ``rate(askr_jobs_enqueued_total[5m])`` is jobs
enqueued a second, and jobs done a second is that less ``deriv(sum(askr_queue_total)[5m])``
and the failed rate.

Periodic tasks (``kombu_sqlqueue.beat``), labelled by ``entry``, when the database has a
schedule: ``askr_beat_runs_total`` and ``askr_beat_late_runs_total`` (counters: runs sent,
and runs sent more than 2 s after they were due), ``askr_beat_overdue_seconds`` (a gauge: how
long the next run has been due unsent; it rises when no beat runs).

And ``askr_up`` (1 when the scrape read the database, 0 when it failed: the reason is
logged) and ``askr_scrape_duration_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..exceptions import SqlQueueError
from ..store.admin import QueueAdmin, QueueStats
from ..store.schedules import LATE_SECONDS, EntryRow, ScheduleTable

logger = logging.getLogger(__name__)

#: (metric name, help text, the QueueStats field it reads).
GAUGES = (
    ("askr_queue_total", "Jobs on the queue: ready, reserved and delayed.", "total"),
    ("askr_queue_ready", "Jobs claimable now (lapsed reservations included).", "ready"),
    ("askr_queue_reserved", "Jobs held by a worker whose reservation is live.", "reserved"),
    ("askr_queue_delayed", "Jobs not available yet (a countdown, an ETA, a backoff).", "delayed"),
    (
        "askr_queue_oldest_seconds",
        "Age in seconds of the oldest ready job (0 when none is ready).",
        "oldest_seconds",
    ),
    ("askr_queue_dead_letters", "Rows of the queue in the failed-jobs table.", "dead_letters"),
    ("askr_queue_paused", "1 while the queue is paused (nothing of it is claimed).", "paused"),
    (
        "askr_queue_waiting_on_limit",
        "Ready jobs the queue's limits (concurrency, rate) hold back now.",
        "waiting_on_limit",
    ),
)


class QueueCollector(Collector):
    """The queues of one database's tables (one layout) as Prometheus gauges."""

    def __init__(self, admin: QueueAdmin) -> None:
        self.admin = admin

    def describe(self) -> Iterable[Metric]:
        # Registering must not read the database (prometheus_client calls describe, then
        # collect when describe is missing).
        return []

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily("askr_up", "1 when this scrape read the queue tables, else 0.")
        try:
            stats: list[QueueStats] | None = self.admin.stats()
        except SqlQueueError as exc:
            logger.warning("scrape failed: %s", exc)
            stats = None
        up.add_metric([], 0.0 if stats is None else 1.0)
        yield up
        for name, text, attr in GAUGES if stats is not None else ():
            family = GaugeMetricFamily(name, text, labels=["queue"])
            for row in stats or ():
                family.add_metric([row.queue], float(getattr(row, attr)))
            yield family
        if stats is not None:
            limits = GaugeMetricFamily(
                "askr_queue_concurrency_limit",
                "Jobs of the queue that may be held at once (queues with a limit only).",
                labels=["queue"],
            )
            for row in stats:
                if row.concurrency is not None:
                    limits.add_metric([row.queue], float(row.concurrency))
            yield limits
            rates = GaugeMetricFamily(
                "askr_queue_rate_limit_per_second",
                "Jobs of the queue that may be handed out a second (queues with a rate limit).",
                labels=["queue"],
            )
            for row in stats:
                if row.rate is not None:
                    rates.add_metric([row.queue], row.rate.count / row.rate.period)
            yield rates
            per_key = GaugeMetricFamily(
                "askr_queue_key_concurrency_limit",
                "Jobs of one concurrency key of the queue that may be held at once.",
                labels=["queue"],
            )
            for row in stats:
                if row.key_concurrency is not None:
                    per_key.add_metric([row.queue], float(row.key_concurrency))
            yield per_key
            yield from self._issued()
        duration = GaugeMetricFamily(
            "askr_scrape_duration_seconds", "Seconds this scrape spent reading the tables."
        )
        duration.add_metric([], time.perf_counter() - started)
        yield duration

    def _issued(self) -> Iterator[Metric]:
        """The tables' ids issued as counters; none when they cannot be read (a role without
        the sequence's privilege): the gauges stand, the reason is logged."""
        try:
            jobs, failed = self.admin.issued()
        except SqlQueueError as exc:
            logger.warning("no ids issued in this scrape: %s", exc)
            return
        for name, text, value in (
            ("askr_jobs_enqueued", "Jobs the jobs table has taken (ids it handed out).", jobs),
            (
                "askr_jobs_failed",
                "Rows the failed-jobs table has taken (ids it handed out).",
                failed,
            ),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], float(value))
            yield counter


class ScheduleCollector(Collector):
    """Periodic tasks (``kombu_sqlqueue.beat``), labelled by ``entry``: runs sent and runs
    sent late (counters, from ``askr_beat_entries``), and how overdue each entry's next run
    is now (a gauge: 0 while on time; rising when no beat sends it). Nothing when the
    database has no schedule."""

    def __init__(self, table: ScheduleTable) -> None:
        self.table = table

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            rows = self.table.entries() if self.table.present() else []
        except SqlQueueError as exc:
            logger.warning("no schedule in this scrape: %s", exc)
            return
        if not rows:
            return
        runs = CounterMetricFamily(
            "askr_beat_runs", "Runs of the periodic task sent (by any beat).", labels=["entry"]
        )
        late = CounterMetricFamily(
            "askr_beat_late_runs",
            f"Runs sent more than {LATE_SECONDS:g} s after they were due.",
            labels=["entry"],
        )
        overdue = GaugeMetricFamily(
            "askr_beat_overdue_seconds",
            "How long the entry's next run has been due and not sent (0: on time).",
            labels=["entry"],
        )
        for row in rows:
            runs.add_metric([row.name], float(row.total_run_count))
            late.add_metric([row.name], float(row.late_runs))
            behind = _overdue(row)
            if behind is not None:
                overdue.add_metric([row.name], behind)
        yield runs
        yield late
        yield overdue


def _overdue(row: EntryRow) -> float | None:
    """Seconds the next run of ``row`` is overdue (None: never ran, paused, unreadable)."""
    if not row.enabled or row.last_run_us is None:
        return None
    try:
        from ..beat import InvalidSchedule, until_next_run  # Celery's schedules
    except ImportError:
        return None
    try:
        remaining = until_next_run(row)
    except InvalidSchedule:
        return None
    return None if remaining is None else max(0.0, -remaining)


def serve(
    admin: QueueAdmin, port: int, addr: str = "0.0.0.0", schedule: ScheduleTable | None = None
) -> None:
    """Serve ``/metrics`` on ``addr:port`` until interrupted (and the periodic tasks of
    ``schedule``)."""
    registry = CollectorRegistry()
    registry.register(QueueCollector(admin))
    if schedule is not None:
        registry.register(ScheduleCollector(schedule))
    server, thread = start_http_server(port, addr=addr, registry=registry)
    logger.info("serving metrics on http://%s:%d/metrics", addr, server.server_port)
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
        thread.join(timeout=5)
