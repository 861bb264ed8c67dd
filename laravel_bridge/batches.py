"""``Bus::batch`` jobs run by Python: the batch's options, and its callbacks handed to PHP.

A batched job run or failed by the Python worker is recorded in ``job_batches`` as
Laravel's ``DatabaseBatchRepository`` records it (``laravel_bridge.laravel_tables.
JobBatches``). The batch's ``then`` / ``catch`` / ``finally`` callbacks are PHP closures,
serialized in the batch's ``options``: Python cannot run them, so when Laravel would call
them (``Batch::recordSuccessfulJob`` / ``recordFailedJob``) the worker queues a **queued
closure** (``Illuminate\\Queue\\CallQueuedClosure``, what ``dispatch(function () {…})``
writes) on the batch's queue, and the next PHP worker runs it: it loads the batch and calls
each stored callback as ``Batch::invokeHandlerCallback`` does. Laravel signs queued closures
with the app key (``EncryptionServiceProvider``), so the worker needs it (``--app-key``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kombu_sqlqueue.exceptions import SqlQueueError

from . import php_serialize
from .exceptions import LaravelBridgeError, PhpSerializeError
from .laravel_tables import JobBatches
from .payload import JobCommand, Payload
from .php_serialize import PhpObject
from .tables import PushJob

logger = logging.getLogger(__name__)

CLOSURE_COMMAND = "Illuminate\\Queue\\CallQueuedClosure"
#: How serialized PHP starts; anything else is base64 (PostgreSQL's form).
_PHP_VALUE = re.compile(r"^(?:[aOsibdCEr]:|N;)")
SERIALIZABLE_CLOSURE = "Laravel\\SerializableClosure\\SerializableClosure"
NATIVE = "Laravel\\SerializableClosure\\Serializers\\Native"
SIGNED = "Laravel\\SerializableClosure\\Serializers\\Signed"

#: The PHP the queued closure runs: ``Batch::invokeHandlerCallback`` for each stored callback
#: of one kind (``$message``: the failure's text, for ``catch`` and a failed ``finally``).
CALLBACKS_CODE = """function () use ($batchId, $kind, $message) {
    $batch = \\Illuminate\\Container\\Container::getInstance()
        ->make(\\Illuminate\\Bus\\BatchRepository::class)->find($batchId);
    if ($batch === null) {
        return;
    }
    $e = $message === null ? null : new \\RuntimeException($message);
    foreach ($batch->options[$kind] ?? [] as $handler) {
        try {
            $handler($batch, $e);
        } catch (\\Throwable $thrown) {
            if (function_exists('report')) {
                report($thrown);
            }
        }
    }
}"""


@dataclass(frozen=True)
class BatchOptions:
    """What the worker needs of a batch's ``options`` (``PendingBatch::$options``)."""

    then: int = 0
    catch: int = 0
    finally_: int = 0
    allow_failures: bool = False
    queue: str | None = None
    raw: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, stored: str | bytes | None) -> BatchOptions:
        """``DatabaseBatchRepository::unserialize``: PHP-serialized, base64 on PostgreSQL."""
        if stored is None or stored == "":
            return cls()
        text = stored.decode("utf-8", "surrogateescape") if isinstance(stored, bytes) else stored
        if not _PHP_VALUE.match(text):
            try:
                text = base64.b64decode(text, validate=True).decode("utf-8", "surrogateescape")
            except (binascii.Error, ValueError) as exc:
                raise LaravelBridgeError(f"the batch's options are not PHP data: {exc}") from exc
        try:
            value = php_serialize.loads(text)
        except PhpSerializeError as exc:
            raise LaravelBridgeError(f"the batch's options are not PHP data: {exc}") from exc
        if value == []:  # a:0:{}, what a batch with no then/catch/finally/queue stores
            value = {}
        if not isinstance(value, dict):
            raise LaravelBridgeError("the batch's options are not an array")

        def count(key: str) -> int:
            found = value.get(key)
            return len(found) if isinstance(found, (list, dict)) else 0

        queue = value.get("queue")
        return cls(
            count("then"),
            count("catch"),
            count("finally"),
            value.get("allowFailures") is True,
            queue if isinstance(queue, str) and queue else None,
            value,
        )

    def has(self, kind: str) -> bool:
        return bool({"then": self.then, "catch": self.catch, "finally": self.finally_}[kind])


def callbacks_job(
    batch_id: str,
    kind: str,
    queue: str,
    *,
    signing_key: bytes | None,
    message: str | None = None,
) -> PushJob:
    """The queued closure that runs the batch's ``kind`` callbacks in PHP, signed with
    ``signing_key`` (the app key's bytes) as Laravel signs queued closures."""
    native = PhpObject(
        NATIVE,
        {
            "use": {"batchId": batch_id, "kind": kind, "message": message},
            "function": CALLBACKS_CODE,
            "scope": None,
            "this": None,
            "self": secrets.token_hex(16),
        },
    )
    serializable: PhpObject = native
    if signing_key:
        # Laravel\SerializableClosure\Signers\Hmac: HMAC-SHA256 of the serialized Native with
        # the app key's bytes (EncryptionServiceProvider::parseKey).
        serialized = php_serialize.dumps(native)
        digest = hmac.new(signing_key, serialized, hashlib.sha256).digest()
        serializable = PhpObject(
            SIGNED,
            {
                "serializable": serialized.decode("utf-8", "surrogateescape"),
                "hash": base64.b64encode(digest).decode("ascii"),
            },
        )
    closure = PhpObject(SERIALIZABLE_CLOSURE, {"serializable": serializable})
    command = JobCommand.build(
        CLOSURE_COMMAND,
        {"closure": closure, "failureCallbacks": [], "deleteWhenMissingModels": True,
         "batchId": None},
        queue=queue,
    )  # fmt: skip
    name = f"Closure (laravel_bridge: batch {kind} callbacks)"
    payload = Payload.build(command, display_name=name)
    return PushJob(queue, payload.to_json(), 0, payload.uuid)


def record_job(
    batches: JobBatches,
    batch_id: str,
    job_uuid: str,
    name: str,
    *,
    failure: str | None,
    queue: str,
    signing_key: bytes | None,
    push: Callable[[PushJob], object],
    warn: Callable[[str, str], None],
) -> None:
    """``CallQueuedHandler::ensureSuccessfulBatchJobIsRecorded`` / ``failed()``'s
    ``ensureFailedBatchJobIsRecorded`` for job ``job_uuid`` (``name``) of batch ``batch_id``
    (``failure``: None when it succeeded, else the failure's message): the counts as
    ``Batch::recordSuccessfulJob`` / ``recordFailedJob`` write them, and the callbacks those
    would call, queued for PHP with ``push`` on the batch's queue (else ``queue``), signed
    with ``signing_key``. Problems go to ``warn(batch_id, text)``; nothing raises."""
    try:
        row = batches.find(batch_id)
        if row is None:
            return  # pruned or never stored: Laravel's find() returns null too
        options = BatchOptions.parse(row.get("options"))
        counts = batches.record(
            batch_id, job_uuid, succeeded=failure is None, allow_failures=options.allow_failures
        )
    except (SqlQueueError, LaravelBridgeError) as error:
        warn(batch_id, f"could not record {name} in batch {batch_id}: {error}")
        return
    if counts is None:
        return
    kinds: list[str] = []
    if failure is None and counts.pending_jobs == 0 and options.has("then"):
        kinds.append("then")
    if failure is not None and counts.failed_jobs == 1 and options.has("catch"):
        kinds.append("catch")
    if counts.all_ran_once and options.has("finally"):
        kinds.append("finally")
    if not kinds:
        return
    if signing_key is None:
        warn(batch_id, f"batch {batch_id}'s {'/'.join(kinds)} callbacks did not run: PHP runs "
             "them from a queued closure signed with the app key; give the worker the app key "
             "(--app-key, or the queue format's app_key)")  # fmt: skip
        return
    for kind in kinds:
        try:
            push(
                callbacks_job(batch_id, kind, options.queue or queue, signing_key=signing_key,
                              message=failure)
            )  # fmt: skip
        except (SqlQueueError, LaravelBridgeError) as error:
            logger.error("batch %s's %s callbacks could not be queued: %s", batch_id, kind, error)
            continue
        logger.info(
            "batch %s: its %s callbacks are queued for PHP on %r",
            batch_id,
            kind,
            options.queue or queue,
        )


__all__ = ["CALLBACKS_CODE", "BatchOptions", "callbacks_job", "record_job"]
