"""Laravel's worker rules for a job's attempts, as pure functions.

``Illuminate\\Queue\\Worker`` (Laravel 8.83) decides three things about a job from its
payload (``maxTries``, ``retryUntil``, ``backoff``, ``maxExceptions``,
``failOnTimeout``) and the worker's options (``--tries``, ``--backoff``): whether a job
just reserved has run out of attempts already, whether one that just failed has, and how
long a released one waits. ``laravel-bridge work`` and the Celery format
(:mod:`laravel_bridge.messages`) both follow them from here.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Laravel's ``--tries`` default: one attempt for a job that names no ``$tries``.
DEFAULT_TRIES = 1


def attempted_too_many(name: str) -> str:
    """``MaxAttemptsExceededException``'s message, as Laravel writes it."""
    return (
        f"{name} has been attempted too many times or run too long. "
        "The job may have previously timed out."
    )


def exceeded_before_start(attempts: int, now: int, max_tries: int, retry_until: int | None) -> bool:
    """``markJobAsFailedIfAlreadyExceedsMaxAttempts``: a job reserved for its
    ``attempts``-th time is failed without running when its ``retryUntil`` has passed, or
    (with none) when ``attempts`` is past ``max_tries`` (0: unlimited)."""
    if retry_until:
        return now > retry_until
    return max_tries != 0 and attempts > max_tries


def out_of_attempts(attempts: int, now: int, max_tries: int, retry_until: int | None) -> bool:
    """``markJobAsFailedIfWillExceedMaxAttempts``: a job that just failed its
    ``attempts``-th attempt is failed, not released, when its ``retryUntil`` has come, or
    (with none) when it has had ``max_tries`` attempts (0: unlimited)."""
    if retry_until:
        return retry_until <= now
    return max_tries > 0 and attempts >= max_tries


def at_attempts_cap(attempts: int, cap: int) -> bool:
    """Ours, not Laravel's: a job that just failed its ``attempts``-th attempt is failed, not
    released, once ``attempts`` reached ``cap`` — what the jobs table's ``attempts`` column
    holds (255 in Laravel 8-12's ``TINYINT`` on MySQL, 65535 in 13's ``SMALLINT``), whatever
    its ``retryUntil`` or ``tries=0`` say. Released there, its next reservation could not
    count the attempt (PHP's worker fails on the overflow; ours would be fenced by an
    ``attempts`` value that no longer changes)."""
    return cap > 0 and attempts >= cap


def attempts_cap_text(name: str, cap: int) -> str:
    """Why a job was failed at :func:`at_attempts_cap`."""
    return (
        f"{name} reached the safety cap of {cap} attempts "
        "(what the jobs table's attempts column holds)"
    )


def backoff_delay(backoff: Sequence[int], attempts: int) -> int:
    """``calculateBackoff``: the entry for this attempt (the first for the first), else the
    last one; 0 for none."""
    if not backoff:
        return 0
    index = attempts - 1
    return max(0, int(backoff[index] if 0 <= index < len(backoff) else backoff[-1]))


__all__ = [
    "DEFAULT_TRIES",
    "at_attempts_cap",
    "attempted_too_many",
    "attempts_cap_text",
    "backoff_delay",
    "exceeded_before_start",
    "out_of_attempts",
]
