"""Eight consumer processes (and two producers) on one queue, on every engine: exactly once,
no lock errors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_harness import Proc, consumer_args, producer_args, sql, wait_until

from kombu_sqlqueue.store import JobStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

QUEUE = "bulk"
JOBS = 3000
CONSUMERS = 8


def run_consumers_and_producers(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    tmp_path: Path,
    producers: list[tuple[str, int]],
    *,
    preload: bool,
) -> tuple[list[Proc], list[Proc]]:
    """Start producers (before or alongside the consumers) and consumers; drain; stop them all."""
    stop = tmp_path / "stop"
    start = tmp_path / "start"

    # Publishing alongside consumers: each producer waits at half until a consumer delivered.
    pause = [] if preload else ["--pause-until-delivered", str(tmp_path)]

    def start_producers() -> list[Proc]:
        return [
            spawn(f"producer-{prefix}", producer_args(broker_url, QUEUE, count, prefix, *pause))
            for prefix, count in producers
        ]

    prods = []
    if preload:
        prods = start_producers()
        for p in prods:
            assert p.wait(timeout=60) == 0, p.output
        assert sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0] == JOBS

    consumers = []
    for i in range(CONSUMERS):
        # Half claim one at a time, half in batches of up to 8.
        prefetch = "1" if i % 2 else "8"
        consumers.append(spawn(f"consumer-{i}", consumer_args(
            broker_url, QUEUE, "ack", "--visibility", "60", "--prefetch", prefetch,
            "--out", str(tmp_path / f"delivered-{i}.txt"), "--stop-file", str(stop),
            "--start-file", str(start),
        )))  # fmt: skip
    for c in consumers:
        c.wait_event("ready", timeout=60)
    start.touch()
    if not preload:
        prods = start_producers()  # publishing while the consumers consume
        for p in prods:
            assert p.wait(timeout=90) == 0, p.output

    def drained() -> bool:
        return sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0] == 0

    wait_until(drained, 90, interval=0.2, what="every job consumed")
    stop.touch()
    for c in consumers:
        assert c.wait(timeout=20) == 0, c.output[-4000:]
    return consumers, prods


def check_exactly_once(
    consumers: list[Proc], prods: list[Proc], tmp_path: Path, expected: set[str], store: JobStore
) -> None:
    delivered: Counter[str] = Counter()
    per_process = []
    for i, c in enumerate(consumers):
        ids = (tmp_path / f"delivered-{i}.txt").read_text().split()
        per_process.append(len(ids))
        delivered.update(ids)
        received = c.events("received")
        assert len(received) == len(ids), c.name
        assert all(r["attempts"] == 1 and not r["redelivered"] for r in received), c.name
    duplicates = {k: n for k, n in delivered.items() if n > 1}
    assert not duplicates, f"delivered more than once: {sorted(duplicates)[:20]}"
    missing = expected - set(delivered)
    assert not missing, f"{len(missing)} never delivered, e.g. {sorted(missing)[:20]}"
    assert set(delivered) == expected
    assert sum(per_process) == len(expected)
    assert sum(1 for n in per_process if n > 0) >= 2, per_process  # real competition
    for proc in (*consumers, *prods):
        assert "database is locked" not in proc.output, proc.name
        assert "Traceback" not in proc.output, proc.output[-4000:]
    assert store.dead_letters() == []
    print("deliveries per consumer:", per_process)
    print(
        "busy retries logged:", sum(p.output.count("database busy") for p in (*consumers, *prods))
    )


def test_eight_consumers_preloaded_3000_exactly_once(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore, tmp_path: Path
) -> None:
    """3,000 preloaded jobs, 8 consumer processes: each delivered exactly once, none missing."""
    consumers, prods = run_consumers_and_producers(
        spawn, broker_url, db_url, tmp_path, [("pre", JOBS)], preload=True
    )
    check_exactly_once(consumers, prods, tmp_path, {f"pre-{n}" for n in range(JOBS)}, store)


def test_eight_consumers_two_producers_concurrently_exactly_once(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore, tmp_path: Path
) -> None:
    """2 producers publish 1,500 each while 8 consumers run: exactly once, never "locked"."""
    half = JOBS // 2
    consumers, prods = run_consumers_and_producers(
        spawn, broker_url, db_url, tmp_path, [("pa", half), ("pb", half)], preload=False
    )
    expected = {f"pa-{n}" for n in range(half)} | {f"pb-{n}" for n in range(half)}
    check_exactly_once(consumers, prods, tmp_path, expected, store)
    # Consuming really overlapped publishing (the producers paused at half until it did).
    first_delivery = min(r["t"] for c in consumers for r in c.events("received"))
    assert first_delivery < max(p.events("done")[0]["t"] for p in prods)
