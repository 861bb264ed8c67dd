"""Moving the messages waiting on another Kombu broker (Redis, say) into queues of ours.

What ``kombu-sqlqueue move`` does when an app leaves its old broker: for each queue, take one
message at a time from the source with ``basic_get`` (unacknowledged), publish the same bytes —
body, content type and encoding, headers, priority and the other properties — to the queue of
the same name here, and only then acknowledge it at the source. A crash between the two leaves
the message at the source (Redis hands it back after its visibility timeout), so a message is
never lost, and at worst moved twice. Celery's ``eta`` header comes along, so a countdown task
keeps its time (our transport delays it natively).

A message that cannot be copied — its properties are not what Kombu publishes (an
``expiration`` that is no number), or this transport refuses it — does not stop the move: it
is kept here as a dead letter of its queue, with the reason and the message as the source
held it (Kombu's JSON envelope), acknowledged at the source, and counted; the rest goes on.
``kombu-sqlqueue failed list`` shows it, ``failed show`` its bytes.

Why not ``celery migrate``: on Redis its wait for "no more messages" never times out (Kombu's
Redis ``drain_events`` keeps polling), so it does not end by itself, and with ``--limit`` it
stops before acknowledging the last message it already republished. Kombu only, no SQL.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kombu.connection import Connection
from kombu.entity import Queue
from kombu.message import Message
from kombu.utils.url import maybe_sanitize_url

from .exceptions import ConfigurationError, StoreError
from .store import NewJob
from .store.names import validate_queue_name

#: Connection attempts before a broker that does not answer is an error (kombu's
#: OperationalError), about 3 seconds of backoff.
CONNECT_RETRIES = 3

#: Message properties copied as they are (AMQP's basic properties Celery and Kombu set).
COPIED_PROPERTIES = ("priority", "correlation_id", "reply_to", "delivery_mode", "expiration")


@dataclass(frozen=True, slots=True)
class Moved:
    """One queue's outcome: how many messages moved, and how many could not be copied and
    were kept here as dead letters instead."""

    queue: str
    moved: int
    dead_lettered: int = 0


def _connect(url: str, options: Mapping[str, Any] | None) -> Connection:
    """A connection that gives up after a few tries (Kombu's default retries forever)."""
    conn = Connection(url, transport_options=dict(options or {}), connect_timeout=10)
    conn.ensure_connection(max_retries=CONNECT_RETRIES)
    return conn


def _check_arguments(queues: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(queues))
    if not names:
        raise ConfigurationError("name at least one queue to move")
    for name in names:
        validate_queue_name(name)
    return names


@dataclass(frozen=True, slots=True)
class Waiting:
    """What the source still holds: messages waiting per queue, and (Redis) unacknowledged."""

    queues: dict[str, int]
    unacked: int | None


def count_waiting(
    source_url: str, queues: Iterable[str], *, source_options: Mapping[str, Any] | None = None
) -> Waiting:
    """How many messages wait on each of ``queues`` at the source (every priority included).

    ``unacked`` counts the messages Redis holds as delivered but not acknowledged — running,
    prefetched, ETA tasks a worker keeps, or left by a worker that was killed; ``None`` for a
    source that keeps no such record.
    """
    names = _check_arguments(queues)
    with _connect(source_url, source_options) as source:
        channel = source.default_channel
        counts = {name: _waiting(channel, name) for name in names}
        unacked_key = getattr(channel, "unacked_key", None)
        unacked = int(channel.client.hlen(unacked_key)) if unacked_key else None
    return Waiting(counts, unacked)


def move_messages(
    source_url: str,
    dest_url: str,
    queues: Iterable[str],
    *,
    limit: int | None = None,
    on_message: Callable[[str, Message], None] | None = None,
    on_dead_letter: Callable[[str, Message, str], None] | None = None,
    source_options: Mapping[str, Any] | None = None,
    dest_options: Mapping[str, Any] | None = None,
    restore_unacked: bool = False,
) -> list[Moved]:
    """Move every message waiting on ``queues`` of ``source_url`` into ``dest_url``.

    Stops on each queue when the source has nothing left to hand out (messages another
    consumer holds stay where they are), or after ``limit`` messages per queue.
    ``on_message(queue, message)`` is called after each one is safely moved;
    ``on_dead_letter(queue, message, reason)`` after one that could not be copied was kept
    here as a dead letter (and acknowledged at the source).

    ``source_options`` are the old broker's transport options (on Redis ``priority_steps``,
    ``sep`` and ``global_keyprefix`` name its keys: give the ones the app used);
    ``dest_options`` ours (``priority_order`` is applied as a message is written: give the one
    the app uses). ``restore_unacked`` first puts Redis's unacknowledged messages back on
    their lists — only when no old worker is alive, since a live one may be running them.
    """
    names = _check_arguments(queues)
    if not dest_url.startswith("sqlqueue+"):
        raise ConfigurationError(
            f"the destination must be a sqlqueue+ URL (got {dest_url.split('://')[0]}://…)"
        )
    if restore_unacked:
        _restore_unacked(source_url, source_options or {})
    results: list[Moved] = []
    with (
        _connect(source_url, source_options) as source,
        _connect(dest_url, dest_options) as dest,
    ):
        source_channel = source.default_channel
        producer = dest.Producer()
        store = dest.transport.store
        for name in names:
            target = Queue(name, routing_key=name)
            target(dest.default_channel).declare()
            moved = dead = 0
            while limit is None or moved + dead < limit:
                message = Queue(name)(source_channel).get(no_ack=False, accept=None)
                if message is None:
                    break
                try:
                    _publish_copy(producer, target, message)
                except (ValueError, TypeError) as exc:
                    if isinstance(exc, StoreError):  # the database's condition, not the message's
                        raise
                    reason = f"not moved from {_source_name(source_url)}: {exc}"
                    store.dead_letter_message(_as_dead_letter(name, message), reason)
                    message.ack()  # kept here first, so it is not lost
                    dead += 1
                    if on_dead_letter is not None:
                        on_dead_letter(name, message, reason)
                    continue
                message.ack()  # only once the copy is committed here
                moved += 1
                if on_message is not None:
                    on_message(name, message)
            results.append(Moved(name, moved, dead))
    return results


def _source_name(url: str) -> str:
    """The source broker's URL, its password masked."""
    return str(maybe_sanitize_url(url))


def _as_dead_letter(queue: str, message: Message) -> NewJob:
    """A message the move could not copy, as the source held it: a virtual transport's
    (Redis's) own JSON envelope, else one built from what Kombu read (the body base64)."""
    raw = getattr(message, "_raw", None)
    envelope: Any = raw
    if not isinstance(raw, Mapping):
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
        envelope = {
            "body": base64.b64encode(body).decode("ascii"),
            "content-type": message.content_type,
            "content-encoding": message.content_encoding,
            "headers": message.headers,
            "properties": {**(message.properties or {}), "body_encoding": "base64"},
        }
    payload = json.dumps(envelope, default=repr, ensure_ascii=False).encode("utf-8", "replace")
    task_id = (message.headers or {}).get("id")
    return NewJob(queue, payload, uuid=task_id if isinstance(task_id, str) else None)


def _waiting(channel: Any, name: str) -> int:
    """Messages waiting on ``name``; 0 for a queue the source does not know (Redis drops an
    emptied list, and a passive declare of a missing queue is a channel error)."""
    try:
        return int(Queue(name)(channel).queue_declare(passive=True).message_count)
    except channel.connection.channel_errors:
        return 0


def _restore_unacked(source_url: str, source_options: Mapping[str, Any]) -> None:
    """Kombu's own Redis restore, with every entry taken as lapsed: back to its list."""
    with _connect(source_url, {**source_options, "visibility_timeout": 0}) as source:
        qos = source.default_channel.qos
        if not hasattr(qos, "restore_visible"):
            raise ConfigurationError(
                "--restore-unacked: this source keeps no unacknowledged messages (Redis does)"
            )
        qos.restore_visible(num=None)


def _publish_copy(producer: Any, target: Queue, message: Message) -> None:
    """The same bytes and metadata, to ``target`` through the default exchange."""
    properties = dict(message.properties or {})
    headers = dict(message.headers or {})
    copied = {key: properties[key] for key in COPIED_PROPERTIES if properties.get(key) is not None}
    if "expiration" in copied:  # AMQP carries it as a string of milliseconds
        try:
            copied["expiration"] = float(copied["expiration"]) / 1000.0
        except (TypeError, ValueError):
            raise ValueError(
                f"its expiration property {copied['expiration']!r} is not a number of milliseconds"
            ) from None
    # Kombu's Message decompressed the body when it read it, and leaves the header: compress
    # it again the same way (as ``celery migrate``'s republish does), or the consumer would
    # decompress plain bytes.
    compression = headers.pop("compression", None)
    producer.publish(
        message.body,
        exchange="",
        routing_key=target.name,
        headers=headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        compression=compression,
        declare=[],
        retry=True,
        **copied,
    )
