"""PostgreSQL's wake-up names: a NOTIFY channel per queue, a turn key per queue set."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kombu_sqlqueue.store.engines.postgresql import CHANNEL_PREFIX, channel_of, turn_key


@given(st.text(min_size=1, max_size=300))
def test_a_channel_is_a_short_plain_identifier_whatever_the_queue_name(queue: str) -> None:
    channel = channel_of(queue.replace("\x00", "_"))
    assert channel.startswith(CHANNEL_PREFIX) and len(channel.encode()) <= 63
    assert channel.replace("_", "").isalnum() and channel == channel.lower()


def test_channels_and_turn_keys_tell_queues_apart() -> None:
    assert channel_of("celery") != channel_of("Celery") != channel_of("celery ")
    assert channel_of("a") == channel_of("a")
    assert turn_key({"a", "b"}) == turn_key(["b", "a"])  # a set: order does not matter
    assert len({turn_key({"a"}), turn_key({"b"}), turn_key({"a", "b"}), turn_key({"ab"})}) == 4
    assert -(2**63) <= turn_key({"a"}) < 2**63  # a bigint for pg_advisory_lock
