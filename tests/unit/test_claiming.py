"""The claim screen every store uses: what becomes of each row a claim reserved."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kombu_sqlqueue.exceptions import ClaimLimitExceeded
from kombu_sqlqueue.store.claiming import (
    ClaimedRow,
    ClaimParams,
    claim_limit,
    exhausted_reason,
    screen,
)
from kombu_sqlqueue.store.model import MAX_CLAIM

NOW = 1_000


def row(job_id: int, **fields: object) -> ClaimedRow:
    base = ClaimedRow(job_id, "q", b"x", 0, NOW - 10, 1, 3, None, None, False)
    return base._replace(**fields)


def test_rows_come_back_in_claim_order_priority_then_age_then_id() -> None:
    rows = [
        row(3, available_at=5),
        row(1, priority=2, available_at=9),
        row(2, available_at=5),
        row(4, available_at=1),
    ]
    screened = screen(rows, NOW, "tok", None)
    assert [job.id for job in screened.jobs] == [1, 4, 2, 3]
    assert screened.plain


def test_a_row_past_its_ttl_is_discarded_not_handed_out_nor_dead_lettered() -> None:
    screened = screen([row(1, expires_at=NOW), row(2, expires_at=NOW + 1)], NOW, "t", None)
    assert [r.id for r in screened.past_ttl] == [1]
    assert [j.id for j in screened.jobs] == [2]
    assert not screened.exhausted and not screened.plain


def test_the_lower_of_the_rows_and_the_claimers_attempts_limit_decides() -> None:
    rows = [row(1, attempts=3, max_attempts=3), row(2, attempts=3, max_attempts=5)]
    assert [j.id for j in screen(rows, NOW, "t", None).jobs] == [1, 2]
    screened = screen(rows, NOW, "t", 2)
    assert [(r.id, limit) for r, limit in screened.exhausted] == [(1, 2), (2, 2)]
    assert exhausted_reason(2) == "max attempts exceeded (2 of 2 used)"
    assert claim_limit(5, None) == 5 and claim_limit(5, 7) == 5 and claim_limit(5, 2) == 2


def test_a_delivery_carries_the_claims_token_its_limit_and_lapsed() -> None:
    (job,) = screen([row(7, uuid="u-7", lapsed=True, attempts=2)], NOW, "tok", 4).jobs
    assert (job.id, job.token, job.max_attempts, job.attempts) == (7, "tok", 3, 2)
    assert job.uuid == "u-7" and job.lapsed and job.receipt.token == "tok"


def test_a_statements_row_is_read_with_bytes_payload_and_a_bool_lapsed() -> None:
    read = ClaimedRow.read((1, "q", memoryview(b"ab"), 0, 5, 1, 3, None, None), 1)
    assert read.payload == b"ab" and type(read.payload) is bytes and read.lapsed is True


def test_claim_params_check_the_claim_and_keep_the_token_across_rounds() -> None:
    params = ClaimParams.of("q", 5, 30, 100.2, "w1@host")
    assert (params.now, params.until, params.holder) == (100, 131, "w1@host")
    again = params.more(2)
    assert (again.n, again.token, again.until) == (2, params.token, params.until)
    assert set(params.binds()) == {"queue", "n", "now", "until", "token", "holder", "instance"}
    with pytest.raises(ClaimLimitExceeded):
        ClaimParams.of("q", MAX_CLAIM + 1, 30, 100, None)


rows_strategy = st.lists(
    st.builds(
        ClaimedRow,
        id=st.integers(1, 10_000),
        queue=st.just("q"),
        payload=st.binary(max_size=4),
        priority=st.integers(0, 9),
        available_at=st.integers(0, NOW),
        attempts=st.integers(1, 6),
        max_attempts=st.integers(1, 6),
        uuid=st.none() | st.text(max_size=4),
        expires_at=st.none() | st.integers(NOW - 5, NOW + 5),
        lapsed=st.booleans(),
    ),
    max_size=30,
    unique_by=lambda r: r.id,
)


@given(rows_strategy, st.none() | st.integers(1, 6))
def test_every_row_gets_exactly_one_fate_and_each_list_is_in_claim_order(
    rows: list[ClaimedRow], max_attempts: int | None
) -> None:
    screened = screen(rows, NOW, "t", max_attempts)
    handed = [j.id for j in screened.jobs]
    exhausted = [r.id for r, _ in screened.exhausted]
    past = [r.id for r in screened.past_ttl]
    assert sorted(handed + exhausted + past) == sorted(r.id for r in rows)
    by_id = {r.id: r for r in rows}
    for ids in (handed, exhausted, past):
        assert ids == sorted(ids, key=lambda i: by_id[i].order())
    for job in screened.jobs:
        source = by_id[job.id]
        assert source.expires_at is None or source.expires_at > NOW
        assert job.attempts <= job.max_attempts == claim_limit(source.max_attempts, max_attempts)
    for r, limit in screened.exhausted:
        assert r.attempts > limit
