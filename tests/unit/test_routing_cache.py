"""The channel's memory of the stored bindings (``kombu_sqlqueue.routing``): no database."""

from __future__ import annotations

from kombu_sqlqueue.routing import MAX_REMEMBERED_MISSES, RoutingCache
from kombu_sqlqueue.store import Route


def test_a_table_is_fresh_for_cache_seconds_and_forgotten_with_its_misses() -> None:
    cache = RoutingCache(cache_seconds=2.0)
    assert cache.fresh_table("ex", now=10.0) is None and cache.read_at("ex") is None
    cache.keep("ex", 10.0, ["row"])
    assert cache.fresh_table("ex", now=11.9) == ["row"] and cache.read_at("ex") == 10.0
    assert cache.fresh_table("ex", now=12.0) is None
    cache.remember_miss("ex", "key", now=11.0)
    assert cache.missed_recently("ex", "key", now=12.5)
    assert not cache.missed_recently("ex", "key", now=13.0)
    cache.forget("ex")
    assert cache.read_at("ex") is None and not cache.missed_recently("ex", "key", now=11.5)


def test_learning_takes_the_stored_type_unless_declared_here_and_follows_ttls() -> None:
    cache = RoutingCache(cache_seconds=1.0)
    routes = [Route("k", "q1", "topic", 5.0), Route("k", "q2", "topic", None)]
    assert cache.learn("ex", routes, declared_type=None) == "topic"
    assert cache.stored_type("ex") == "topic"
    assert cache.message_ttl("q1") == 5.0 and cache.message_ttl("q2") is None
    assert cache.learn("mine", routes, declared_type="fanout") == "fanout"
    assert cache.stored_type("mine") is None  # declared here: not another process's type
    # Re-declared without a TTL: the one read before is dropped.
    cache.learn("ex", [Route("k", "q1", "topic", None)], declared_type=None)
    assert cache.message_ttl("q1") is None
    # No binding left: the type read before stands, else direct.
    assert cache.learn("ex", [], declared_type=None) == "topic"
    assert cache.learn("new", [], declared_type=None) == "direct"


def test_misses_are_bounded() -> None:
    cache = RoutingCache(cache_seconds=60.0)
    for i in range(MAX_REMEMBERED_MISSES + 5):
        cache.remember_miss("ex", f"key{i}", now=1.0)
    assert len(cache._misses) <= MAX_REMEMBERED_MISSES
    cache.forget_miss("ex", f"key{MAX_REMEMBERED_MISSES + 4}")
    assert not cache.missed_recently("ex", f"key{MAX_REMEMBERED_MISSES + 4}", now=2.0)
