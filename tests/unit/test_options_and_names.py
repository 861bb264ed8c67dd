"""Transport options parsing, queue-name rules, eta parsing and URL resolution."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from kombu_sqlqueue.envelope import eta_delay
from kombu_sqlqueue.exceptions import (
    ConfigurationError,
    InvalidQueueName,
    InvalidURL,
    UnknownTransportOption,
)
from kombu_sqlqueue.options import TransportOptions
from kombu_sqlqueue.store import parse_store_url, validate_queue_name


def test_defaults() -> None:
    o = TransportOptions.from_mapping({})
    assert o.visibility_timeout == 60 and o.effective_renew_interval == 20
    assert o.max_attempts == 25 and o.priority_order == "high_first"
    assert o.for_queue("any").backoff.base == 1 and o.for_queue("any").backoff.cap == 3600


def test_per_queue_overrides_fall_back_to_global_values() -> None:
    o = TransportOptions.from_mapping(
        {"max_attempts": 7, "backoff_cap": 60, "queue_options": {"slow": {"max_attempts": 2}}}
    )
    assert o.for_queue("slow").max_attempts == 2
    assert o.for_queue("slow").backoff.cap == 60
    assert o.for_queue("other").max_attempts == 7


def test_unknown_option_names_the_nearest_known_one() -> None:
    with pytest.raises(UnknownTransportOption, match="did you mean 'visibility_timeout'"):
        TransportOptions.from_mapping({"visibilty_timeout": 5})


def test_kombu_generic_options_pass() -> None:
    TransportOptions.from_mapping(
        {"max_retries": 3, "interval_start": 0, "body_encoding": "base64"}
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"visibility_timeout": 0.5},
        {"visibility_timeout": "60"},
        {"max_attempts": 0},
        {"max_attempts": 2.5},
        {"priority_order": "random"},
        {"claim_batch_size": 5000},
        {"sqlite_synchronous": "SOMETIMES"},
        {"queue_options": {"q": {"retries": 1}}},
        {"queue_options": {"bad\nname": {}}},
        {"create_tables": "yes"},
        {"visibility_timeout": 2, "renew_interval": 5},
    ],
)
def test_bad_values_are_configuration_errors(raw: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        TransportOptions.from_mapping(raw)


def test_queue_name_rules() -> None:
    assert validate_queue_name("celery@host.celery.pidbox") == "celery@host.celery.pidbox"
    for bad in ("", "a\x1bb", "x" * 256, "trailing "):
        with pytest.raises(InvalidQueueName):
            validate_queue_name(bad)
    with pytest.raises(InvalidQueueName, match="must be a string"):
        validate_queue_name(42)


def test_eta_delay() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert eta_delay({}, now) == 0
    assert eta_delay({"eta": (now + timedelta(seconds=90)).isoformat()}, now) == 90
    assert eta_delay({"eta": (now - timedelta(seconds=5)).isoformat()}, now) == 0
    assert eta_delay({"eta": "2030-01-01T00:00:30"}, now) == 30  # naive = UTC
    assert eta_delay({"eta": "not a date"}, now) == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("oracle://scott@db/x", "not supported"),
        ("::nonsense::", "cannot parse"),
    ],
)
def test_bad_store_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidURL, match=message):
        parse_store_url(url)


# -- queue_formats ---------------------------------------------------------------------------


def test_queue_formats_name_a_format_by_entry_point_or_path() -> None:
    from kombu_sqlqueue.formats import load_formats

    formats = load_formats(
        {"php": "laravel", "php2": {"format": "laravel", "layout": "askr"}, "php3": "laravel"}
    )
    assert formats["php"] is formats["php3"]  # one object (one table) for equal settings
    assert formats["php2"] is not formats["php"] and formats["php2"].name == "laravel"
    by_path = load_formats({"x": "laravel_bridge.messages:laravel"})
    assert by_path["x"].name == "laravel"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"php": "nope"}, "unknown queue format 'nope'; installed: laravel"),
        ({"php": "no.such.module:thing"}, "cannot be loaded"),
        ({"php": {"layout": "askr"}}, "must be a format name or a mapping with a 'format' key"),
        ({"php": 3}, "must be a format name"),
        ({"php": {"format": "laravel", "tries": -1}}, "tries must be an int >= 0"),
        ({"php": {"format": "laravel", "colour": "red"}}, "unknown settings ['colour']"),
        ({"php": {"format": "laravel", "layout": "redis"}}, "layout must be one of laravel, askr"),
        ({" bad": "laravel"}, "queue"),
    ],
)
def test_a_bad_queue_format_is_a_configuration_error(spec: dict[str, object], message: str) -> None:
    from kombu_sqlqueue.exceptions import SqlQueueError
    from kombu_sqlqueue.formats import load_formats

    with pytest.raises(SqlQueueError, match=re.escape(message)):
        load_formats(spec)


def test_queue_formats_must_be_a_mapping_of_valid_queue_names() -> None:
    with pytest.raises(ConfigurationError, match="queue_formats must be a mapping"):
        TransportOptions.from_mapping({"queue_formats": ["php"]})
    with pytest.raises(ConfigurationError, match="queue_formats"):
        TransportOptions.from_mapping({"queue_formats": {"": "laravel"}})


# -- dedupe_window (enqueue once; tests/integration/test_dedupe.py runs it) ---------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "dedupe_window must be >= 1"),
        ("60", "must be a number"),
        ({"bad\tqueue": 60}, "non-printable"),
        ({"q": -5}, "dedupe_window['q'] must be >= 1"),
    ],
)
def test_a_bad_dedupe_window_is_refused(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TransportOptions.from_mapping({"dedupe_window": value})


def test_dedupe_windows_per_queue() -> None:
    per_queue = TransportOptions.from_mapping({"dedupe_window": {"a": 30}})
    assert (per_queue.dedupe_window_for("a"), per_queue.dedupe_window_for("b")) == (30.0, None)
    everywhere = TransportOptions.from_mapping({"dedupe_window": 90})
    assert everywhere.dedupe_window_for("any") == 90.0
    assert TransportOptions.from_mapping({}).dedupe_window_for("a") is None
