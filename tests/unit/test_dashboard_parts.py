"""The dashboard's parts without a server: the plots' arithmetic (throughput from the ids
each table handed out and the jobs table's growth; depths per layout and per queue; a
database that could not be read leaves a gap, not a zero) and a failed job's headline."""

from __future__ import annotations

import pytest

from kombu_sqlqueue.dashboard.sampler import MOST_QUEUES, Sampler, layout_sample
from kombu_sqlqueue.store.admin import QueueStats


def stats(**depths: tuple[int, int, int]) -> list[QueueStats]:
    return [
        QueueStats(q, total=r + h + d, ready=r, reserved=h, delayed=d)
        for q, (r, h, d) in depths.items()
    ]


def test_rates_come_from_ids_issued_and_the_table_s_growth() -> None:
    first = layout_sample(stats(a=(10, 0, 0)), (100, 5), None, 0)
    assert first.rates is None and first.total == 10
    # 5 s later: 40 new jobs, 2 new failed; the table went from 10 to 20 jobs:
    # 40 - 10 - 2 = 28 left it done.
    later = layout_sample(stats(a=(15, 3, 2)), (140, 7), first, 5.0)
    assert later.rates == pytest.approx((8.0, 5.6, 0.4))
    # Tables made again (ids back to 0): nothing negative.
    again = layout_sample(stats(), (0, 0), later, 5.0)
    assert again.rates == (0.0, 4.0, 0.0)


def test_only_the_deepest_queues_are_kept_but_the_layout_s_depth_is_every_queue_s() -> None:
    many = {f"q{n}": (n, 0, 0) for n in range(MOST_QUEUES + 50)}
    sample = layout_sample(stats(**many), (0, 0), None, 0)
    assert len(sample.queues) == MOST_QUEUES and "q0" not in sample.queues
    assert sample.depth.ready == sum(range(MOST_QUEUES + 50))


def test_series_per_layout_and_queue_with_gaps_where_a_read_failed() -> None:
    answers: list[object] = [
        (stats(a=(3, 1, 0), b=(1, 0, 2)), (10, 0)),
        RuntimeError("database down"),
        (stats(a=(1, 0, 0)), (12, 1)),
    ]

    def read(layout: str) -> tuple[list[QueueStats], tuple[int, int]] | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    sampler = Sampler(["askr"], read)
    for _ in range(3):
        sampler.sample_now()
    whole = sampler.series("askr")
    assert whole["ready"] == [4, None, 1] and whole["delayed"] == [2, None, 0]
    assert whole["enqueued"][:2] == [None, None] and whole["enqueued"][2] is not None
    assert sampler.series("askr", "b")["delayed"] == [2, None, 0]  # b drained: 0, not a gap
    assert sampler.series("other")["ready"] == [None, None, None]


def test_ids_issued_that_could_not_be_read_leave_the_depths_and_no_rates() -> None:
    first = layout_sample(stats(a=(10, 0, 0)), (100, 5), None, 0)
    blind = layout_sample(stats(a=(12, 0, 0)), None, first, 5.0)
    assert blind.rates is None and blind.depth.ready == 12
    # The next readable sample has nothing to take a difference from: no rates yet.
    assert layout_sample(stats(a=(12, 0, 0)), (110, 5), blind, 5.0).rates is None


def test_a_stopped_sampler_samples_again_when_started_again() -> None:
    import threading

    read = threading.Event()

    def reader(layout: str) -> tuple[list[QueueStats], tuple[int, int]] | None:
        read.set()
        return stats(a=(1, 0, 0)), (1, 0)

    sampler = Sampler(["askr"], reader, every=0.05)
    sampler.start()
    assert read.wait(10)
    sampler.stop()
    read.clear()
    sampler.start()  # a host app closed the dashboard and serves it again
    try:
        assert read.wait(10)
    finally:
        sampler.stop()


def test_a_failed_job_s_headline_is_the_exception_not_traceback_s_first_line() -> None:
    from kombu_sqlqueue.dashboard.app import headline_of

    trace = (
        "Traceback (most recent call last):\n"
        '  File "t.py", line 1, in f\n    raise ValueError("x")\n'
        "ValueError: card declined\n"
    )
    assert headline_of(trace) == "ValueError: card declined"
    assert headline_of("Exception: SMTP down in /app/Job.php:12\nStack trace:\n#0 …") == (
        "Exception: SMTP down in /app/Job.php:12"
    )
    assert headline_of(None) == "" and headline_of("\n\n") == ""
    assert headline_of("Traceback (most recent call last):\n  only frames") == (
        "Traceback (most recent call last):"
    )


def test_sign_in_failures_are_counted_per_client_in_a_window() -> None:
    from kombu_sqlqueue.dashboard.security import SIGN_IN_FAILURES, SIGN_IN_WINDOW, Guard

    guard = Guard("t")
    for n in range(SIGN_IN_FAILURES):
        guard.sign_in_failed("10.0.0.1", now=100.0 + n)
    assert guard.sign_in_wait("10.0.0.1", now=110.0) == pytest.approx(SIGN_IN_WINDOW - 10)
    assert guard.sign_in_wait("10.0.0.2", now=110.0) == 0  # another client
    assert guard.sign_in_wait("10.0.0.1", now=100.0 + SIGN_IN_WINDOW) == 0  # the window passed
