"""Payloads, commands and encryption against Debian's real Laravel 8.83 — both directions."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from laravel_harness import Laravel
from laravel_support import APP_KEY

from laravel_bridge import (
    DecryptError,
    Encrypter,
    EncryptionKeyError,
    JobCommand,
    ModelIdentifier,
    Payload,
    PayloadError,
    PhpEnum,
    PhpObject,
    dumps,
    private,
    protected,
)
from laravel_bridge.payload import date_to_php, laravel_json

INVOICE_LINES = [
    {"sku": "A-1", "qty": 2, "price": 9.5},
    {"sku": "B/2", "qty": 1, "price": 0.1},
]


def invoice(**own: Any) -> dict[str, Any]:
    """``App\\Jobs\\SendInvoice``'s properties in PHP's order (class body, then promoted)."""
    return {
        "tries": 3,
        "backoff": [1, 5, 10],
        "timeout": 120,
        "maxExceptions": 2,
        "failOnTimeout": True,
        **own,
    }


def test_laravel_payloads_re_encode_byte_for_byte(dispatched: dict[str, dict[str, Any]]) -> None:
    for case, row in dispatched.items():
        payload = Payload.parse(row["payload"])
        assert payload.to_json() == row["payload"], case
        if not payload.is_encrypted:
            command = payload.command()
            assert command.dumps() == payload.command_text.encode(), case  # type: ignore[union-attr]


def test_python_builds_the_payload_laravel_builds(dispatched: dict[str, dict[str, Any]]) -> None:
    laravel = Payload.parse(dispatched["invoice"]["payload"])
    command = JobCommand.build(
        "App\\Jobs\\SendInvoice",
        invoice(
            invoiceId=7,
            customer='Zoë / "Ünïcode" \u2028',
            amount=19.99,
            lines=INVOICE_LINES,
            **{protected("note"): "pay soon", private("App\\Jobs\\SendInvoice", "urgent"): True},
        ),
        queue="high",
    )
    ours = Payload.build(
        command,
        uuid=laravel.uuid,
        max_tries=3,
        max_exceptions=2,
        fail_on_timeout=True,
        backoff=[1, 5, 10],
        timeout=120,
    )
    assert ours.to_json() == dispatched["invoice"]["payload"]

    delayed = Payload.parse(dispatched["delayed"]["payload"])
    command = JobCommand.build(
        "App\\Jobs\\SendInvoice",
        invoice(
            invoiceId=8,
            customer="Bob",
            amount=3.0,
            lines=[],
            **{protected("note"): None, private("App\\Jobs\\SendInvoice", "urgent"): False},
        ),
        connection="database",
        delay=60,
    )
    ours = Payload.build(
        command,
        uuid=delayed.uuid,
        max_tries=3,
        max_exceptions=2,
        fail_on_timeout=True,
        backoff="1,5,10",
        timeout=120,
    )
    assert ours.to_json() == dispatched["delayed"]["payload"]


def test_payload_keys_and_command_view(dispatched: dict[str, dict[str, Any]]) -> None:
    payload = Payload.parse(dispatched["invoice"]["payload"])
    assert (payload.job, payload.max_tries, payload.backoff) == (
        "Illuminate\\Queue\\CallQueuedHandler@call",
        3,
        [1, 5, 10],
    )
    assert (payload.timeout, payload.max_exceptions, payload.fail_on_timeout) == (120, 2, True)
    command = payload.command()
    assert command.class_name == "App\\Jobs\\SendInvoice" == payload.command_name
    props = command.properties
    assert props["invoiceId"] == 7 and props["amount"] == 19.99 and props["lines"] == INVOICE_LINES
    assert props["note"] == "pay soon" and props["urgent"] is True  # protected, private
    assert command.obj.visibility("urgent") == "private"
    assert command.queue == "high" and command.queueable("delay") is None

    dates = Payload.parse(dispatched["dates_and_enums"]["payload"])
    assert dates.retry_until == 2_000_000_000
    view = dates.command().properties
    assert view["when"] == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=ZoneInfo("Europe/Paris"))
    assert view["status"] == PhpEnum("App\\Jobs\\Status", "Paid")
    open_1, open_2, paid = dates.command().obj.get("statuses")
    assert open_1 is open_2 and paid.case == "Paid"  # PHP wrote r: for the repeat

    chained = Payload.parse(dispatched["chained"]["payload"]).command().chained
    assert [c.class_name for c in chained] == ["App\\Jobs\\ResizeImage", "App\\Jobs\\SendInvoice"]
    assert chained[1].properties["invoiceId"] == 10

    assert dispatched["delayed"]["available_delay"] == 60
    assert dispatched["invoice"]["queue"] == "high"
    assert Payload.parse(dispatched["delayed"]["payload"]).command().queueable("delay") == 60


def test_encrypted_command_from_laravel_decrypts(dispatched: dict[str, dict[str, Any]]) -> None:
    payload = Payload.parse(dispatched["encrypted"]["payload"])
    assert payload.is_encrypted
    assert payload.command(Encrypter(APP_KEY)).properties == {"token": "s3cr3t"}
    with pytest.raises(PayloadError, match="encrypted"):
        payload.command()
    other_key = "base64:" + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(DecryptError, match="MAC"):
        payload.command(Encrypter(other_key))


def run_in_php(laravel: Laravel, payload: Payload) -> dict[str, Any]:
    db = laravel.workdir / "laravel.db"
    db.touch()
    result: dict[str, Any] = json.loads(
        laravel.run("run-command", "AES-256-CBC", APP_KEY, str(db), stdin=payload.to_json())
    )
    return result


def test_python_built_commands_resolve_in_laravel(laravel: Laravel) -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, 600000, tzinfo=ZoneInfo("America/New_York"))
    paid = PhpEnum("App\\Jobs\\Status", "Paid")
    command = JobCommand.build(
        "App\\Jobs\\ResizeImage",
        {"path": "/img/ü.png", "when": when, "status": paid, "statuses": [paid, paid]},
        queue="images",
    )
    seen = run_in_php(laravel, Payload.build(command))
    assert seen["class"] == "App\\Jobs\\ResizeImage"
    assert seen["props"]["path"] == "/img/ü.png"
    assert seen["props"]["when"] == "Carbon\\Carbon 2030-01-02 03:04:05.600000 America/New_York"
    assert seen["props"]["status"] == "paid" and seen["props"]["queue"] == "images"

    secret = JobCommand.build("App\\Jobs\\Secret", {"token": "from python"})
    sealed = Payload.build(secret, encrypter=Encrypter(APP_KEY))
    assert sealed.is_encrypted
    assert run_in_php(laravel, sealed)["props"]["token"] == "from python"


@pytest.mark.parametrize("cipher", ["AES-128-CBC", "AES-256-CBC", "AES-128-GCM", "AES-256-GCM"])
def test_encryption_interoperates_both_ways(laravel: Laravel, cipher: str) -> None:
    size = 16 if "128" in cipher else 32
    key = "base64:" + base64.b64encode(os.urandom(size)).decode()
    text = "payload ünïcode / binary"
    from_php = laravel.run("encrypt", cipher, key, text)
    ours = Encrypter(key, cipher)
    assert ours.decrypt_string(from_php).decode() == text
    assert laravel.run("decrypt", cipher, key, ours.encrypt_string(text)) == text


def test_tampering_and_wrong_keys_are_named_errors() -> None:
    key = "base64:" + base64.b64encode(b"k" * 32).decode()
    ours = Encrypter(key)
    token = ours.encrypt_string("secret")
    envelope = json.loads(base64.b64decode(token))
    envelope["value"] = base64.b64encode(b"\x00" * 16).decode()
    tampered = base64.b64encode(json.dumps(envelope).encode()).decode()
    with pytest.raises(DecryptError, match="MAC"):
        ours.decrypt_string(tampered)
    with pytest.raises(DecryptError):
        Encrypter("base64:" + base64.b64encode(b"z" * 32).decode()).decrypt_string(token)
    with pytest.raises(DecryptError, match="invalid"):
        ours.decrypt_string("not base64 json")
    gcm = Encrypter(key, "aes-256-gcm")
    sealed = json.loads(base64.b64decode(gcm.encrypt_string("x")))
    sealed["tag"] = base64.b64encode(b"\x01" * 16).decode()
    with pytest.raises(DecryptError):
        gcm.decrypt_string(base64.b64encode(json.dumps(sealed).encode()))
    with pytest.raises(EncryptionKeyError, match="32-byte key"):
        Encrypter("base64:" + base64.b64encode(b"short").decode())
    with pytest.raises(EncryptionKeyError, match="unsupported cipher"):
        Encrypter(key, "des")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not an object"),
        ('{"uuid": "x"}', "no 'job'"),
        ('{"job": "X", "data": {"command": "O:broken"}}', "not PHP-serialized"),
        # PHP data but no object: said so, not taken for an encrypted string (issue 11)
        ('{"job": "X", "data": {"command": "s:1:\\"x\\";"}}', "a str, not a PHP object"),
        ('{"job": "X", "data": {"command": "i:5;"}}', "a int, not a PHP object"),
        ('{"job": "X", "data": {"command": "i:5"}}', "neither PHP serialize"),
        ('{"job": "X", "backoff": "a,b"}', "bad backoff"),
    ],
)
def test_malformed_payloads_are_payload_errors(raw: str, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        payload = Payload.parse(raw)
        _ = payload.backoff
        payload.command()


def test_json_style_matches_php_json_encode(php: str) -> None:
    samples = ["a/b", "\u2028\u2029", "tab\there\nnl", "\x00\x01\x1f\x7f", 'q"\\', "ünï 😀", ""]
    value = {"list": samples, "n": [0, -1, 2**53], "f": [0.1, 1.5, -2.25], "t": [True, None]}
    code = (
        "echo json_encode(json_decode(stream_get_contents(STDIN), true), JSON_UNESCAPED_UNICODE);"
    )
    done = subprocess.run(
        [php, "-r", code], input=json.dumps(value), capture_output=True, text=True, timeout=30
    )
    assert done.stdout == laravel_json(value)


def test_php_objects_in_commands_keep_their_shape() -> None:
    inner = PhpObject("App\\Models\\Thing", {"id": 1})
    command = JobCommand.build("App\\Jobs\\X", {"a": inner, "b": inner})
    assert dumps(command.obj).count(b"r:") == 1  # the second reference is PHP's r:


def test_model_identifiers_and_immutable_dates_both_ways(
    laravel: Laravel, dispatched: dict[str, dict[str, Any]]
) -> None:
    payload = Payload.parse(dispatched["model"]["payload"])
    props = payload.command().properties
    assert props["user"] == ModelIdentifier("App\\Jobs\\User", 42, ("posts", "roles"), "sqlite")
    assert props["since"] == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert payload.command().dumps() == payload.command_text.encode()  # type: ignore[union-attr]

    since = datetime(2026, 6, 7, 8, 9, 10, tzinfo=UTC)
    command = JobCommand.build(
        "App\\Jobs\\SyncUser",
        {
            "user": ModelIdentifier("App\\Jobs\\User", 7, (), None),
            "since": date_to_php(since, "Carbon\\CarbonImmutable"),
        },
    )
    seen = run_in_php(laravel, Payload.build(command))["props"]
    # Laravel restored the model from the database, as a worker would.
    assert seen["user"] == {"model": "App\\Jobs\\User", "attributes": {"id": 7, "name": "Ada"}}
    assert seen["since"] == "Carbon\\CarbonImmutable 2026-06-07 08:09:10.000000 UTC"


def test_unknown_and_newer_keys_survive_a_round_trip(
    dispatched: dict[str, dict[str, Any]],
) -> None:
    data = json.loads(dispatched["invoice"]["payload"])
    data["createdAt"] = 1_700_000_000
    data["data"]["batchId"] = "9a1f-batch"
    data["tags"] = ["billing", "ü/€"]
    data["pushedBy"] = {"host": "web-1"}
    original = laravel_json(data)
    payload = Payload.parse(original)
    assert payload.created_at == 1_700_000_000 and payload.batch_id == "9a1f-batch"
    assert payload.to_json() == original
