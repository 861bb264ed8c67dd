"""The dashboard's plots: depth and throughput over the last hour, sampled by the
dashboard's own process.

Every :data:`SAMPLE_SECONDS` a thread reads, per layout, what the overview reads (each
queue's ready, held and delayed jobs) and :meth:`QueueAdmin.issued` — the ids each table
has handed out. Throughput comes from those: *enqueued* = new job ids, *failed* = new
failed-table ids, *done* = enqueued − the growth of the jobs table − failed (what left
the table without failing: run, or purged; a Laravel job its worker released is re-inserted
by Laravel, so it counts as done and enqueued again). Two key reads and the grouped read
the overview already makes: no table scan is added per sample.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..store.admin import QueueStats

logger = logging.getLogger(__name__)

#: Seconds between two samples.
SAMPLE_SECONDS = 5.0
#: Samples kept: the last hour.
KEPT = int(3600 / SAMPLE_SECONDS)
#: Queues whose depth a sample keeps, per layout (the deepest; a plot of more says nothing).
MOST_QUEUES = 200


@dataclass(frozen=True, slots=True)
class Depth:
    ready: int
    held: int
    delayed: int


@dataclass(frozen=True, slots=True)
class LayoutSample:
    """One layout at one moment: each queue's depth, its tables' ids issued, and the
    rates since the sample before (None for the first)."""

    #: The deepest :data:`MOST_QUEUES` queues' depths.
    queues: dict[str, Depth]
    #: Every queue's, summed.
    depth: Depth
    #: None when they could not be read (no rates then; the depths are still plotted).
    issued: tuple[int, int] | None
    #: Jobs per second since the sample before: enqueued, done, failed.
    rates: tuple[float, float, float] | None = None

    @property
    def total(self) -> int:
        return self.depth.ready + self.depth.held + self.depth.delayed


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    layouts: dict[str, LayoutSample] = field(default_factory=dict)


#: Reads one layout: its queues' stats and its tables' ids issued (None when those could not
#: be read: a role without the sequence's privilege); None when its tables are not in the
#: database (raising what a database raises: the sampler logs it once and leaves the layout
#: out of that sample).
Reader = Callable[[str], tuple[list[QueueStats], tuple[int, int] | None] | None]


def layout_sample(
    stats: list[QueueStats],
    issued: tuple[int, int] | None,
    before: LayoutSample | None,
    seconds: float,
) -> LayoutSample:
    """A layout's sample, its rates from ``before`` (``seconds`` earlier)."""
    deepest = sorted(stats, key=lambda s: s.total, reverse=True)[:MOST_QUEUES]
    queues = {s.queue: Depth(s.ready, s.reserved, s.delayed) for s in deepest}
    depth = Depth(
        *(sum(getattr(s, name) for s in stats) for name in ("ready", "reserved", "delayed"))
    )
    total = depth.ready + depth.held + depth.delayed
    if before is None or before.issued is None or issued is None or seconds <= 0:
        return LayoutSample(queues, depth, issued)
    # A counter that went back (tables dropped and made again): start afresh.
    enqueued = max(0, issued[0] - before.issued[0])
    failed = max(0, issued[1] - before.issued[1])
    done = max(0, enqueued - (total - before.total) - failed)
    per = 1.0 / seconds
    return LayoutSample(queues, depth, issued, (enqueued * per, done * per, failed * per))


class Sampler:
    """Samples every layout every :data:`SAMPLE_SECONDS` in a daemon thread, started by the
    first page that asks for a series (a mounted app gets no startup call of its own) and
    stopped by :meth:`stop`; the last hour kept in memory."""

    def __init__(self, layouts: list[str], read: Reader, every: float = SAMPLE_SECONDS) -> None:
        self.layouts = layouts
        self._read = read
        self.every = every
        self.samples: deque[Sample] = deque(maxlen=KEPT)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: What the last failed read of a layout said (logged when it changes).
        self._said: dict[str, str] = {}

    def start(self) -> None:
        """Sample from now on (again, after :meth:`stop`: a host app may close the
        dashboard at its shutdown and serve it again, as a test client does)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="dashboard-sampler", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.sample_now()
            stop.wait(max(0.0, self.every - (time.monotonic() - started)))

    def sample_now(self) -> Sample:
        """Read every layout once and keep the sample."""
        with self._lock:
            earlier = list(self.samples)
        now = time.time()
        sample = Sample(now)
        for layout in self.layouts:
            try:
                found = self._read(layout)
            except Exception as exc:  # the database's; the next sample tries again
                said = f"{type(exc).__name__}: {exc}"
                if self._said.get(layout) != said:  # once, not every sample
                    logger.warning("dashboard: no plot sample of the %s tables: %s", layout, said)
                    self._said[layout] = said
                continue
            self._said.pop(layout, None)
            if found is None:
                continue
            stats, issued = found
            # Rates since the last sample that read this layout (one that could not
            # left a gap).
            before = next((e for e in reversed(earlier) if layout in e.layouts), None)
            previous = before.layouts[layout] if before else None
            seconds = now - before.at if before else 0.0
            sample.layouts[layout] = layout_sample(stats, issued, previous, seconds)
        with self._lock:
            self.samples.append(sample)
        return sample

    def series(self, layout: str, queue: str | None = None) -> dict[str, list[float | None]]:
        """Columns for a plot (uPlot's shape: ``t`` then one list per line, None where a
        sample has nothing): the layout's total depth and rates, or one queue's depth."""
        with self._lock:
            samples = list(self.samples)
        out: dict[str, list[float | None]] = {
            name: [] for name in ("t", "ready", "held", "delayed", "enqueued", "done", "failed")
        }
        for sample in samples:
            found = sample.layouts.get(layout)
            out["t"].append(round(sample.at, 3))
            if queue is None:
                depths = [found.depth] if found else []
            else:  # a queue not in the sample had no job (or was not among the deepest)
                one = found.queues.get(queue) if found else None
                depths = [one] if one else []
            for name in ("ready", "held", "delayed"):
                out[name].append(sum(getattr(d, name) for d in depths) if found else None)
            rates = found.rates if found and queue is None else None
            for i, name in enumerate(("enqueued", "done", "failed")):
                out[name].append(None if rates is None else round(rates[i], 3))
        return out
