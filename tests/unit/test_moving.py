"""``kombu-sqlqueue move``: another broker's waiting messages copied here, byte for byte.

The source is Kombu's own ``memory://`` broker (one process), the destination our transport
over the in-memory store; the real Redis → database run is ``e2e/test_migrate_from_redis.py``.
"""

from __future__ import annotations

import json
import re
import uuid
import zlib
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from kombu import Connection, Queue

from kombu_sqlqueue.exceptions import ConfigurationError, InvalidQueueName
from kombu_sqlqueue.moving import count_waiting, move_messages
from kombu_sqlqueue.ops.cli import main


@pytest.fixture
def source() -> Iterator[str]:
    """A ``memory://`` broker of its own (Kombu's memory transport is one per process)."""
    url = f"memory://{uuid.uuid4().hex}"
    yield url
    with Connection(url) as conn:
        Queue("work")(conn.default_channel).purge()


def test_moves_body_headers_and_properties_and_empties_the_source(source: str) -> None:
    dest = f"sqlqueue+memory://{uuid.uuid4().hex}"
    with Connection(source) as old:
        producer = old.Producer()
        work = Queue("work", routing_key="work")
        producer.publish(
            b'[[2, 3], {}, {}]', routing_key="work", declare=[work],
            content_type="application/json", content_encoding="utf-8",
            headers={"task": "app.add", "id": "t-1", "eta": None}, priority=7,
            correlation_id="t-1", reply_to="replies",
        )  # fmt: skip
        producer.publish(
            zlib.compress(b"packed"), routing_key="work", declare=[work],
            content_type="application/data", content_encoding="binary",
            headers={"compression": "application/x-gzip"},
        )  # fmt: skip

    seen: list[str] = []
    moved = move_messages(source, dest, ["work"], on_message=lambda q, m: seen.append(q))
    assert [(m.queue, m.moved) for m in moved] == [("work", 2)] and seen == ["work", "work"]

    with Connection(source) as old:
        assert Queue("work")(old.default_channel).get() is None  # nothing left at the source
    with Connection(dest) as new:
        first = Queue("work")(new.default_channel).get(accept=["json", "application/data"])
        second = Queue("work")(new.default_channel).get(accept=["json", "application/data"])
        assert first is not None and second is not None
        assert first.body == b"[[2, 3], {}, {}]" and first.decode() == [[2, 3], {}, {}]
        assert first.headers["task"] == "app.add" and first.headers["id"] == "t-1"
        assert first.properties["priority"] == 7
        assert first.properties["correlation_id"] == "t-1"
        assert first.properties["reply_to"] == "replies"
        assert second.headers["compression"] == "application/x-gzip"
        assert second.decode() == b"packed"  # decompressed once, as at the source
        first.ack()
        second.ack()


def test_limit_moves_at_most_that_many(source: str) -> None:
    dest = f"sqlqueue+memory://{uuid.uuid4().hex}"
    with Connection(source) as old:
        for i in range(5):
            old.Producer().publish({"i": i}, routing_key="work", declare=[Queue("work")])
    assert move_messages(source, dest, ["work"], limit=3)[0].moved == 3
    assert move_messages(source, dest, ["work"])[0].moved == 2


@pytest.mark.parametrize(
    ("dest", "queues", "error", "says"),
    [
        ("redis://elsewhere", ["work"], ConfigurationError, "must be a sqlqueue+ URL"),
        ("sqlqueue+memory://x", [], ConfigurationError, "at least one queue"),
        ("sqlqueue+memory://x", ["bad\x00name"], InvalidQueueName, "queue name"),
    ],
)
def test_bad_arguments_are_named_errors_before_anything_moves(
    source: str, dest: str, queues: list[str], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=re.escape(says)):
        move_messages(source, dest, queues)


def test_the_cli_verb_prints_each_message_and_the_totals(source: str) -> None:
    with Connection(source) as old:
        old.Producer().publish(
            [[], {}, {}], routing_key="work", declare=[Queue("work")],
            headers={"task": "app.add", "id": "abc"},
        )  # fmt: skip
    dest = f"sqlqueue+memory://{uuid.uuid4().hex}"
    done = CliRunner().invoke(main, ["move", source, dest, "work"])
    assert done.exit_code == 0, done.output
    assert done.output == "moved work: app.add abc\nwork: 1 moved\n"
    done = CliRunner().invoke(main, ["move", source, dest, "work", "--json"])
    assert json.loads(done.output) == {"work": {"moved": 0, "dead_lettered": 0}}


def test_check_counts_waiting_messages_and_an_unknown_queue_as_zero(source: str) -> None:
    with Connection(source) as old:
        for i in range(3):
            old.Producer().publish([[i], {}, {}], routing_key="work", declare=[Queue("work")])
    waiting = count_waiting(source, ["work", "never-used"])
    assert waiting.queues == {"work": 3, "never-used": 0}
    assert waiting.unacked is None  # memory:// keeps no unacked record; Redis does


def publish_with_expiration(source: str, expiration: object, task_id: str) -> None:
    """A message whose ``expiration`` property is what ``expiration`` is, as another client
    (not Kombu's Producer, which writes milliseconds) could leave it at the source."""
    with Connection(source) as old:
        channel = old.default_channel
        Queue("work", routing_key="work")(channel).declare()
        message = channel.prepare_message(
            b"[[], {}, {}]", 0, "application/json", "utf-8",
            {"task": "app.add", "id": task_id}, {"expiration": expiration},
        )  # fmt: skip
        channel.basic_publish(message, exchange="", routing_key="work")


def test_a_message_that_cannot_be_copied_is_dead_lettered_here_and_the_move_goes_on(
    source: str,
) -> None:
    """An ``expiration`` that is no number used to end the move with a traceback, the rest
    of the backlog left behind: now it is a dead letter here (its reason and the message
    as the source held it), acknowledged there, counted; the next messages move."""
    publish_with_expiration(source, "1000", "good-1")
    publish_with_expiration(source, "soon", "bad-1")
    publish_with_expiration(source, "2000", "good-2")
    dest = f"sqlqueue+memory://{uuid.uuid4().hex}"
    dead: list[tuple[str, str]] = []
    (moved,) = move_messages(
        source, dest, ["work"], on_dead_letter=lambda q, m, why: dead.append((q, why))
    )
    assert (moved.moved, moved.dead_lettered) == (2, 1)
    assert dead == [
        (
            "work",
            f"not moved from {source}/: "  # the URL as Kombu writes it, a password masked
            "its expiration property 'soon' is not a number of milliseconds",
        )
    ]
    with Connection(source) as old:
        assert Queue("work")(old.default_channel).get() is None  # every one acked there
    with Connection(dest) as new:
        (letter,) = new.transport.store.dead_letters("work")
        assert letter.uuid == "bad-1" and letter.exception == dead[0][1] and letter.attempts == 0
        stored = json.loads(letter.payload)
        assert stored["properties"]["expiration"] == "soon"
        assert stored["headers"] == {"task": "app.add", "id": "bad-1"}
        ids = []
        while (got := Queue("work")(new.default_channel).get()) is not None:
            ids.append(got.headers["id"])
            got.ack()
        assert ids == ["good-1", "good-2"]


def test_the_cli_counts_dead_letters_in_its_summary(source: str) -> None:
    publish_with_expiration(source, "soon", "bad-1")
    dest = f"sqlqueue+memory://{uuid.uuid4().hex}"
    done = CliRunner().invoke(main, ["move", source, dest, "work", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"work": {"moved": 0, "dead_lettered": 1}}
