"""Payloads of Laravel 12.x and 13.x, recorded once with those branches' own
``Queue::createPayload`` (``tests/fixtures/laravel_payloads/``, see ``record.php`` there):
read, and run under Laravel's retry rules, without PHP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import Clock

from laravel_bridge import (
    HandlerRegistry,
    Job,
    LaravelQueue,
    ModelIdentifier,
    Payload,
    Worker,
    WorkerOptions,
)
from laravel_bridge.exceptions import LaravelBridgeError
from laravel_bridge.job import chain_successor, parse_job
from laravel_bridge.tables import PushJob, ReservedJob, open_table

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "laravel_payloads"
VERSIONS = ("12.x", "13.x")


def recorded(version: str) -> dict[str, dict[str, Any]]:
    lines = (FIXTURES / f"laravel-{version}.jsonl").read_text().splitlines()
    return {row["case"]: row for row in map(json.loads, lines)}


def job_of(version: str, case: str) -> Job:
    row = recorded(version)[case]
    return parse_job(ReservedJob(1, row["queue"], row["payload"], 1, None))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_recorded_payload_is_read(version: str) -> None:
    cases = recorded(version)
    assert set(cases) == {"plain", "delayed_no_backoff", "tuned", "on_group", "models",
                          "batched", "chain"}  # fmt: skip
    for case in cases:
        job = job_of(version, case)
        assert job.name.startswith("App\\Jobs\\") and job.kind == "job"
    assert job_of(version, "plain").properties == {"label": "plain"}
    assert job_of(version, "plain").payload.created_at is not None


@pytest.mark.parametrize("version", VERSIONS)
def test_newer_queueable_and_batchable_properties_are_plumbing(version: str) -> None:
    grouped = job_of(version, "on_group")
    assert grouped.properties == {"label": "grouped"}  # messageGroup is Queueable's
    assert grouped.command is not None and grouped.command.queueable("messageGroup") == "orders-7"
    batched = job_of(version, "batched")
    assert batched.properties == {"n": 1}
    assert batched.batch_id == "9a4f7e0c-0000-4000-8000-00000000b47c"
    assert job_of(version, "plain").batch_id is None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_model_collections_class_is_kept(version: str) -> None:
    props = job_of(version, "models").properties
    assert props["users"] == ModelIdentifier(
        "App\\Models\\User", [1, 2], (), None, "App\\Models\\UserCollection"
    )
    assert props["owner"] == ModelIdentifier("App\\Models\\User", 7, (), None, None)
    assert props["users"].to_php()["collectionClass"] == "App\\Models\\UserCollection"
    assert "collectionClass" not in props["owner"].to_php()  # Laravel 8's four properties


@pytest.mark.parametrize("version", VERSIONS)
def test_settings_written_as_payload_keys_are_read(version: str) -> None:
    payload = job_of(version, "tuned").payload
    assert (payload.max_tries, payload.max_exceptions, payload.timeout) == (4, 2, 90)
    assert payload.backoff == [5, 30] and payload.fail_on_timeout
    # 13.x writes deleteWhenMissingModels into the payload; 12.x keeps it on the class.
    assert payload.delete_when_missing_models is (version == "13.x")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_delayed_job_without_backoff_is_retried_after_its_delay(version: str) -> None:
    """``Job::backoff()`` is ``backoff ?? delay``: Laravel 12+ writes ``delay`` (30) and
    retries a ``->delay(30)`` job 30 s after it failed, whatever ``--backoff`` says."""
    clock = Clock()
    table = open_table(f"memory://versions-{version}", layout="askr")
    table.store.clock = clock  # type: ignore[attr-defined]
    try:
        row = recorded(version)["delayed_no_backoff"]
        table.push(PushJob("default", row["payload"], 0))
        registry = HandlerRegistry()
        registry.register("App\\Jobs\\Ping", lambda job: 1 / 0)
        w = Worker(table, WorkerOptions(tries=3, backoff=(5,), once=True), handlers=registry)
        w.clock = clock
        w.run()
        clock.now += 29
        assert table.pop("default", 90) is None  # not after --backoff's 5 s
        clock.now += 1
        again = table.pop("default", 90)
        assert again is not None and again.attempts == 2
    finally:
        table.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_chain_recorded_by_a_newer_laravel_goes_on_from_python(version: str) -> None:
    job = job_of(version, "chain")
    assert job.command is not None
    successor = chain_successor(job.command)
    assert successor is not None
    nxt = Payload.parse(successor.payload)
    assert nxt.command().class_name == "App\\Jobs\\Ping"
    assert nxt.command().properties == {"label": "second"}
    assert [c.class_name for c in nxt.command().chained] == ["App\\Jobs\\Tuned"]


@pytest.mark.parametrize("version", VERSIONS)
def test_python_writes_the_key_set_of_a_chosen_version(version: str) -> None:
    laravel = LaravelQueue("memory://write-" + version, "askr", laravel_version=int(version[:2]))
    try:
        ours = json.loads(laravel.build("App\\Jobs\\Ping", {"label": "x"}, delay=30).payload)
    finally:
        laravel.close()
    theirs = json.loads(recorded(version)["delayed_no_backoff"]["payload"])
    assert list(ours) == list(theirs) and list(ours["data"]) == list(theirs["data"])
    assert ours["delay"] == theirs["delay"] == 30


def test_laravel_8s_key_set_is_the_default() -> None:
    laravel = LaravelQueue("memory://write-8", "askr")
    try:
        payload = json.loads(laravel.build("App\\Jobs\\Ping", {"label": "x"}).payload)
    finally:
        laravel.close()
    assert "createdAt" not in payload and "batchId" not in payload["data"]
    assert Payload.parse(json.dumps(payload)).laravel_version == 8


@pytest.mark.parametrize("version", VERSIONS)
def test_a_chain_successor_has_the_finished_jobs_key_set(version: str) -> None:
    job = job_of(version, "chain")
    assert job.command is not None and job.payload.laravel_version == int(version[:2])
    successor = chain_successor(job.command, laravel_version=job.payload.laravel_version)
    assert successor is not None
    theirs = json.loads(recorded(version)["chain"]["payload"])
    assert list(json.loads(successor.payload)) == list(theirs)


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(LaravelBridgeError, match="laravel_version must be one of"):
        LaravelQueue("memory://write-7", "askr", laravel_version=7)
