"""``Tx.execute_bound``: expanding ``IN`` lists spelled out from the cached compiled SQL,
per list length, in each engine's parameter style (qmark, format, pyformat)."""

from __future__ import annotations

from kombu_sqlqueue.store import JobStore, NewJob


def test_in_lists_of_every_length_and_an_empty_one(store: JobStore) -> None:
    store.ensure_ready()
    ids = [store.enqueue(NewJob("q", f"{n}".encode())) for n in range(5)]
    claimed = store.claim("q", 5, 60)
    tokens = sorted({j.token for j in claimed.jobs})

    def existing(wanted: list[int]) -> list[int]:
        found = store._run(
            lambda tx: tx.execute_bound(store.q.job_existing, {"ids": wanted}).fetchall()
        )
        return sorted(int(r[0]) for r in found)

    def held(by: list[str], wanted: list[int]) -> list[int]:
        found = store._run(
            lambda tx: tx.execute_bound(store.q.job_held, {"tokens": by, "ids": wanted}).fetchall()
        )
        return sorted(int(r[0]) for r in found)

    for n in (1, 3, 5, 3, 1):  # the SQL of each length is built once, then reused
        assert existing([*ids[:n], 10**9]) == ids[:n]
    assert existing([]) == []
    assert held(tokens, ids[1:4]) == ids[1:4]
    assert held(["not-a-token", *tokens], ids) == ids
    assert held(["not-a-token"], ids) == []
    assert held(tokens, []) == []
