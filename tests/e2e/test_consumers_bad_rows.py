"""No stored row stops a real ``celery worker``; no crash is blamed on the innocent.

Rows are written straight into ``askr_jobs`` (the store takes payloads as opaque
bytes), beside valid tasks sent with Celery. A supervisor restarts the worker
whenever it exits, and counts how often that was.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from e2e_harness import E2E_VISIBILITY, Proc, consumer_args, producer_args, sql, task_events

from kombu_sqlqueue.store import JobStore, NewJob

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

QUEUE = "e2e"
VISIBILITY = E2E_VISIBILITY  # the app fixture's


class Supervisor:
    """Starts a worker and starts it again whenever it exits, counting the exits."""

    def __init__(self, start: Callable[[], Proc]) -> None:
        self.start = start
        self.worker = start()
        self.deaths = 0

    def run_until(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return True
            if self.worker.popen.poll() is not None:
                self.deaths += 1
                self.worker = self.start()
            time.sleep(0.2)
        return done()

    def stop(self) -> None:
        self.worker.send_signal(signal.SIGTERM)
        self.worker.wait(timeout=20)


def run_to_the_end(supervisor: Supervisor, store: JobStore, out_file: Path, valid: int) -> bool:
    """Supervise until the queue is empty and ``valid`` tasks ran; stop the worker."""
    try:
        return supervisor.run_until(
            lambda: store.backlog(QUEUE).total == 0 and len(task_events(out_file)) >= valid,
            timeout=120,
        )
    finally:
        supervisor.stop()


def worker_starter(
    spawn: Callable[..., Proc], broker_url: str, out_file: Path, *options: str, **env: str
) -> Callable[[], Proc]:
    counter = iter(range(1000))

    def start() -> Proc:
        n = next(counter)
        worker = spawn(
            f"worker{n}",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "apps.celery_app",
                "worker",
                "-l",
                "info",
                "-n",
                f"bad{n}@%h",
                *options,
            ],
            E2E_BROKER_URL=broker_url,
            E2E_OUT=str(out_file),
            E2E_VISIBILITY=str(VISIBILITY),
            **env,
        )
        worker.wait_text("ready.", timeout=60)
        return worker

    return start


def template_message(app: Celery, store: JobStore, db_url: str) -> dict[str, Any]:
    """A real task message as Celery published it and the table stores it."""
    app.send_task("e2e.record_late", args=["template"], queue="template")
    (payload,) = sql(db_url, "SELECT payload FROM askr_jobs WHERE queue = ?", "template")[0]
    store.purge("template")
    message: dict[str, Any] = json.loads(bytes(payload))
    return message


def changed(message: dict[str, Any], path: str, value: Any = ..., drop: bool = False) -> bytes:
    message = json.loads(json.dumps(message))
    node: Any = message
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    if drop:
        node.pop(last, None)
    else:
        node[last] = value
    return json.dumps(message).encode()


def b64_json(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def bad_rows(template: dict[str, Any], big: int) -> dict[str, tuple[bytes, str]]:
    """Every kind of bad row: name → (stored bytes, a phrase its dead-letter reason holds)."""
    deep = "[" * 1000 + "]" * 1000
    return {
        "not_json": (b"{this is not json", "payload is not JSON"),
        "empty": (b"", "payload is not JSON"),
        "scalar": (b"42", "payload is int, not dict"),
        "invalid_utf8": (b'{"properties": {}, "body": "\xff\xfe"}', "payload is not JSON"),
        "no_properties": (b'{"body": "x", "headers": {}}', "no properties"),
        "properties_not_object": (changed(template, "properties", "x"), "properties is str"),
        "bad_base64": (changed(template, "body", "!!!not base64"), "not valid base64"),
        "body_a_number": (changed(template, "body", 12345), "body is int"),
        "wrong_shape": (changed(template, "body", b64_json([["a"], {}])), "[args, kwargs, embed]"),
        "headers_a_string": (changed(template, "headers", "x"), "headers is str"),
        "task_a_list": (changed(template, "headers.task", ["e2e.record"]), "headers.task is list"),
        "no_task_id": (changed(template, "headers.id", drop=True), "headers.id"),
        "deep_json": (json.dumps(template).encode()[:-1] + b', "deep": ' + deep.encode() + b"}",
                      "deeper than 200"),
        "unknown_content_type": (changed(template, "content-type", "application/x-nope"), ""),
        "unregistered_task": (changed(template, "headers.task", "nope.nothing"), ""),
        "no_task_header": (changed(template, "headers.task", drop=True), ""),
        "garbage_big": (bytes(range(256)) * (big // 256), "payload is not JSON"),
    }  # fmt: skip


def test_every_bad_row_is_dead_lettered_once_and_valid_tasks_run_once(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    store: JobStore,
    app: Celery,
    out_file: Path,
) -> None:
    store.ensure_ready()
    store.size(QUEUE)  # a connection: a server engine learns its payload limit
    big = min(10 * 1024 * 1024, store.engine.max_payload_bytes - 4096)
    rows = bad_rows(template_message(app, store, db_url), big)
    valid = [f"v{i}" for i in range(21)]
    ids: dict[str, int] = {}
    bad = iter(rows.items())
    for label in valid:  # valid and bad rows interleaved in the table
        app.send_task("e2e.record_late", args=[label], queue=QUEUE)
        kind = next(bad, None)
        if kind is not None:
            ids[kind[0]] = store.enqueue(NewJob(QUEUE, kind[1][0]))
    for name, (payload, _reason) in bad:
        ids[name] = store.enqueue(NewJob(QUEUE, payload))
    assert len(ids) == len(rows)

    supervisor = Supervisor(
        worker_starter(spawn, broker_url, out_file, "--pool=prefork", "-c", "2", E2E_PREFETCH="4")
    )
    finished = run_to_the_end(supervisor, store, out_file, len(valid))
    worker_output = supervisor.worker.output
    assert finished, worker_output
    assert supervisor.deaths == 0, worker_output

    ran = sorted(r["label"] for r in task_events(out_file))
    assert ran == sorted(valid)  # each exactly once

    failed = sql(db_url, "SELECT payload, exception FROM askr_failed_jobs WHERE queue = ?", QUEUE)
    assert len(failed) == len(rows), [e for _p, e in failed]
    by_payload: dict[bytes, list[str]] = {}
    for payload, exception in failed:
        by_payload.setdefault(bytes(payload), []).append(str(exception))
    for name, (payload, reason) in rows.items():
        reasons = by_payload.get(payload)
        assert reasons is not None and len(reasons) == 1, (name, reasons)
        assert reason in reasons[0], (name, reasons[0])


def test_a_task_that_kills_its_worker_is_dead_lettered_and_innocents_run(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    store: JobStore,
    app: Celery,
    out_file: Path,
) -> None:
    """A solo worker prefetching 4 dies on one task, again and again: only that task pays."""
    app.send_task("e2e.kill_worker", args=["killer"], queue=QUEUE)
    valid = [f"v{i}" for i in range(5)]
    for label in valid:
        app.send_task("e2e.record_late", args=[label], queue=QUEUE)
    supervisor = Supervisor(
        worker_starter(
            spawn, broker_url, out_file, "--pool=solo", E2E_PREFETCH="4", E2E_MAX_ATTEMPTS="3"
        )
    )
    finished = run_to_the_end(supervisor, store, out_file, len(valid))
    assert finished, supervisor.worker.output
    ran = sorted(r["label"] for r in task_events(out_file))
    assert ran == valid  # each exactly once
    starts = [r for r in task_events(out_file, "started") if r["label"] == "killer"]
    assert len(starts) == 3 and supervisor.deaths == 3
    failed = sql(db_url, "SELECT exception, attempts FROM askr_failed_jobs WHERE queue = ?", QUEUE)
    assert len(failed) == 1, failed  # the killer only: no valid task was dead-lettered
    assert "max attempts exceeded (3 of 3 used)" in failed[0][0] and failed[0][1] == 3


def test_messages_whose_reservation_was_lost_while_stopped_are_not_started(
    spawn: Callable[..., Proc], broker_url: str, tmp_path: Path
) -> None:
    """Kombu consumer A holds 6 (prefetch 6), SIGSTOPped past the visibility timeout while
    running the first (5 s each: room for a slow machine to send the signal); B takes all
    6 over. Resumed, A finishes the one it had started and
    starts none of the other 5."""
    queue = "lostq"
    producer = spawn("producer", producer_args(broker_url, queue, 6, "m"))
    assert producer.wait(timeout=30) == 0, producer.output
    a_out, b_out = tmp_path / "a.txt", tmp_path / "b.txt"
    a = spawn("consumer-a", consumer_args(broker_url, queue, "ack", "--visibility", "2",
                                          "--prefetch", "6", "--sleep", "5",
                                          "--out", str(a_out), "--idle-exit", "8"))  # fmt: skip
    a.wait_event("received", timeout=20)
    a.send_signal(signal.SIGSTOP)
    time.sleep(3.5)  # past the 2 s visibility timeout (whole seconds, rounded up)
    stop_b = tmp_path / "stop-b"
    b = spawn("consumer-b", consumer_args(broker_url, queue, "ack", "--visibility", "30",
                                          "--prefetch", "6", "--out", str(b_out),
                                          "--stop-file", str(stop_b)))  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(b.events("received")) < 6:
        time.sleep(0.1)
    assert len(b.events("received")) == 6, b.output
    a.send_signal(signal.SIGCONT)
    assert a.wait(timeout=30) == 0, a.output
    stop_b.touch()
    assert b.wait(timeout=30) == 0, b.output
    assert len(a.events("received")) == 1, a.output  # the one it had started only
    assert "not starting job" in a.stderr


def test_a_kombu_consumer_dead_letters_every_bad_row_and_goes_on(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore, tmp_path: Path
) -> None:
    """The plain Kombu entry point (apps/consumer.py): the envelope's bad kinds, any engine."""
    queue = "kombuq"
    producer = spawn("producer", producer_args(broker_url, queue, 1, "template"))
    assert producer.wait(timeout=30) == 0, producer.output
    (payload,) = sql(db_url, "SELECT payload FROM askr_jobs WHERE queue = ?", queue)[0]
    store.purge(queue)
    template = json.loads(bytes(payload))
    store.size(queue)  # a connection: a server engine learns its payload limit
    rows = {
        name: row
        for name, row in bad_rows(template, min(2 * 1024 * 1024, store.engine.max_payload_bytes))
        .items()
        if name not in ("unknown_content_type", "unregistered_task", "no_task_header")
        and "task" not in name and "shape" not in name
    }  # fmt: skip
    rows["body_not_json"] = (changed(template, "body", base64.b64encode(b"{x").decode()),
                             "body is not readable JSON")  # fmt: skip
    rows["unknown_compression"] = (changed(template, "headers", {"compression": "nope"}),
                                   "cannot be decompressed")  # fmt: skip
    for _name, (payload, _reason) in rows.items():
        store.enqueue(NewJob(queue, payload))
    producer = spawn("producer2", producer_args(broker_url, queue, 10, "v"))
    assert producer.wait(timeout=30) == 0, producer.output

    out, stop = tmp_path / "out.txt", tmp_path / "stop"
    supervisor = Supervisor(
        lambda: spawn("consumer", consumer_args(broker_url, queue, "ack", "--prefetch", "4",
                                                "--out", str(out), "--stop-file", str(stop)))
    )  # fmt: skip
    try:
        finished = supervisor.run_until(
            lambda: (
                store.backlog(queue).total == 0
                and out.exists()
                and len(out.read_text().split()) >= 10
            ),
            timeout=60,
        )
    finally:
        stop.touch()
        supervisor.worker.wait(timeout=30)
    assert finished, supervisor.worker.output
    assert supervisor.deaths == 0, supervisor.worker.output
    assert sorted(out.read_text().split()) == sorted(f"v-{i}" for i in range(10))
    failed = sql(db_url, "SELECT payload, exception FROM askr_failed_jobs WHERE queue = ?", queue)
    by_payload = {bytes(p): str(e) for p, e in failed}
    assert len(failed) == len(rows) == len(by_payload)
    for name, (payload, reason) in rows.items():
        assert reason in by_payload[payload], (name, by_payload.get(payload))
