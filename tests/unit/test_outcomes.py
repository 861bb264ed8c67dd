"""Laravel's rules for a job's outcome (``laravel_bridge.outcomes``), as verdicts: what the
worker and the queue format both write."""

from __future__ import annotations

from laravel_bridge.outcomes import (
    Attempt,
    Failed,
    LaravelRules,
    Released,
    RuleOptions,
)
from laravel_bridge.rules import attempted_too_many, attempts_cap_text


def _rules(**options: object) -> LaravelRules:
    def no_tables() -> object:
        raise AssertionError("these verdicts need no app table")

    return LaravelRules(no_tables, RuleOptions(**options), unique_locks_hint="--x")  # type: ignore[arg-type]


def test_a_job_with_tries_left_is_released_with_its_backoff_for_this_attempt() -> None:
    attempt = Attempt("App\\Jobs\\X", "u1", attempts=2, max_tries=3, backoff=(5, 30))
    assert _rules().after_exception(attempt, 100, timed_out=False) == Released(30.0)


def test_the_workers_tries_and_backoff_apply_when_the_payload_names_none() -> None:
    attempt = Attempt("X", "u1", attempts=1)
    assert _rules(tries=2, backoff=(7,)).after_exception(attempt, 0, timed_out=False) == (
        Released(7.0)
    )
    assert _rules(tries=1).after_exception(attempt, 0, timed_out=False) == Failed()


def test_a_timed_out_job_fails_with_laravels_exceeded_message() -> None:
    attempt = Attempt("X", "u1", attempts=1, max_tries=3, fail_on_timeout=True)
    verdict = _rules().after_exception(attempt, 0, timed_out=True)
    assert verdict == Failed(attempted_too_many("X"))
    # Without failOnTimeout it is released (the exceeded text is only for a failure).
    attempt = Attempt("X", "u1", attempts=1, max_tries=3)
    assert _rules().after_exception(attempt, 0, timed_out=True) == Released(0.0)


def test_retry_until_decides_and_tries_do_not() -> None:
    attempt = Attempt("X", "u1", attempts=9, max_tries=1, retry_until=1000)
    assert _rules().after_exception(attempt, 999, timed_out=False) == Released(0.0)
    assert _rules().after_exception(attempt, 1000, timed_out=False) == Failed()
    assert _rules().before_start(attempt, 1001) == attempted_too_many("X")
    assert _rules().before_start(attempt, 1000) is None


def test_the_attempts_cap_fails_a_release_whatever_retry_until_says() -> None:
    attempt = Attempt("X", "u1", attempts=255, max_tries=0, retry_until=10**9, attempts_cap=255)
    assert _rules().release(attempt, 5) == Failed(attempts_cap_text("X", 255), capped=True)
    assert _rules().before_start(Attempt("X", "u", attempts=256, attempts_cap=255), 0) == (
        attempts_cap_text("X", 255)
    )


def test_a_release_delay_is_kept_to_what_available_at_holds() -> None:
    attempt = Attempt("X", "u1", attempts=1)
    assert _rules().release(attempt, -3) == Released(0.0)
    released = _rules().release(attempt, 10**12)
    assert isinstance(released, Released) and released.delay < 10**12
