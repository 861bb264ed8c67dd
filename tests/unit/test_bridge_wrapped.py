"""What Laravel wraps (listeners, mailables, notifications, closures), read without PHP.

The real payloads are made by Laravel itself in ``e2e_laravel/test_laravel_things.py``;
these build the same shapes by hand to pin the edges: names, unpacking limits, refusals.
"""

from __future__ import annotations

import pytest

from laravel_bridge import HandlerRegistry, JobCommand, Payload, PhpObject
from laravel_bridge.exceptions import LaravelBridgeError, PayloadTooDeep
from laravel_bridge.job import MalformedJob, parse_job
from laravel_bridge.payload import unpack
from laravel_bridge.tables import ReservedJob

LISTENER = "App\\Listeners\\SendShipmentNotification"


def listener_row(data: object, display: str | None = LISTENER) -> ReservedJob:
    wrapper = PhpObject(
        "Illuminate\\Events\\CallQueuedListener",
        {"class": LISTENER, "method": "handle", "data": data},
    )
    payload = Payload.build(JobCommand(wrapper), display_name=display)
    return ReservedJob(1, "default", payload.to_json(), 1, None)


def test_a_listener_is_named_by_its_display_name_and_gets_its_event() -> None:
    event = PhpObject("App\\Events\\OrderShipped", {"orderId": 5})
    job = parse_job(listener_row([event]))
    assert (job.name, job.kind) == (LISTENER, "listener")
    assert job.event == event and job.handler_names[1] == "Illuminate\\Events\\CallQueuedListener"


def test_listener_data_kept_serialized_is_read_as_laravel_reads_it() -> None:
    from laravel_bridge import php_serialize

    data = php_serialize.dumps([PhpObject("App\\Events\\X", {"n": 1})])
    assert parse_job(listener_row(data)).event["n"] == 1


def test_a_listener_whose_data_is_no_array_is_malformed_with_the_reason() -> None:
    with pytest.raises(MalformedJob, match="the listener's data is a int, not an array"):
        parse_job(listener_row(42))


def test_a_wrapper_without_display_name_falls_back_to_the_wrappers_name() -> None:
    job = parse_job(listener_row([], display=None))
    assert job.name == "Illuminate\\Events\\CallQueuedListener" and job.kind == "listener"


def test_an_unhandled_listener_is_left_undecoded() -> None:
    registry = HandlerRegistry()
    job = parse_job(listener_row("not php at all"), handled=lambda n: n in registry)
    assert job.command is None and job.name == LISTENER


def test_a_mailable_that_is_no_object_is_malformed() -> None:
    wrapper = PhpObject("Illuminate\\Mail\\SendQueuedMailable", {"mailable": "x"})
    row = ReservedJob(1, "default", Payload.build(JobCommand(wrapper)).to_json(), 1, None)
    with pytest.raises(MalformedJob, match="mailable is 'x', not an object"):
        parse_job(row)


def test_unpack_descends_into_objects_and_is_bounded() -> None:
    inner = PhpObject("A", {"\0*\0secret": [PhpObject("B", {"n": 1})]})
    out = unpack({"a": inner})
    assert out["a"] is not inner and out["a"]["secret"][0]["n"] == 1
    assert out["a"].visibility("secret") == "protected"
    cyclic = PhpObject("C", {})
    cyclic.properties["self"] = cyclic
    with pytest.raises(PayloadTooDeep, match="MAX_COMMAND_DEPTH"):
        unpack(cyclic)


@pytest.mark.parametrize(
    "name", ["Illuminate\\Queue\\CallQueuedClosure", "\\Illuminate\\Queue\\CallQueuedClosure",
             "Closure (routes/web.php:12)"]
)  # fmt: skip
def test_a_handler_for_a_closure_is_refused_with_the_reason(name: str) -> None:
    with pytest.raises(LaravelBridgeError, match="queued closure: PHP code, which Python cannot"):
        HandlerRegistry().register(name, lambda job: None)
