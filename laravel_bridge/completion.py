"""A handler completes its Laravel job in its own transaction: ``job.complete(conn)``.

A handler whose effects are in the jobs table's database writes them and the deletion of
its job in one transaction, fenced by the delivery's reservation (Laravel's: the row's id
and the ``attempts`` its pop wrote; contract v1's: the claim token)::

    @handles("App\\\\Jobs\\\\ChargeOrder")
    def charge(job):
        with engine.begin() as conn:
            conn.execute(payments.insert().values(order_id=job.properties["orderId"]))
            job.complete(conn)       # the job is gone exactly when this commits

The invariant — **the effects commit exactly when the job is done, and never twice** — is
``kombu_sqlqueue.complete``'s, on Laravel's ``jobs`` table or contract v1's. A delivery
whose reservation was taken over (the worker stopped past ``retry_after``, a job that
outlived it: Laravel's workers do not renew a reservation) gets ``DeliveryLost`` before
the handler commits, so its transaction rolls back. The next job of a chain is stored in
the same transaction: a step and the next one commit together.

After the handler the worker reads the row (:func:`completed_here`): gone, and the
completion committed — the job is done (its ``Processed`` line, its unique lock, its
batch), and the worker's own delete is not sent; still there, and the transaction rolled
back — the job settles as it would have (returned: done; raised: Laravel's rules).

Known limit: a row is gone too when, after a completion that rolled back, the reservation
lapsed and another worker took the job and finished it before this handler returned; it
is then counted as this handler's completion (only the bookkeeping after a job — its
unique lock's release, its batch's count — can run twice; no effect does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kombu_sqlqueue.exceptions import DeliveryLost, NotCompletable, StoreError
from kombu_sqlqueue.store.enlist import Enlistment

from .tables import JobTable, PushJob, ReservedJob

logger = logging.getLogger(__name__)


def completer(
    table: JobTable, job: ReservedJob, then: Callable[[], Sequence[PushJob]]
) -> Callable[[Enlistment], None]:
    """What ``Job.complete`` calls for reservation ``job`` of ``table``: delete the job and
    store ``then()`` (the chain's next job) in the enlistment's transaction, fenced."""

    def complete(enlistment: Enlistment) -> None:
        view = table.joined(enlistment)
        if view is None:
            raise NotCompletable(
                "job.complete() writes in the connection's open transaction, and it has "
                "none: call it inside the transaction that writes the job's effects"
            )
        if not view.delete(job, then()):
            raise DeliveryLost(
                f"job {job.id} is no longer this delivery's (its reservation lapsed and "
                "another worker took it, or it was settled already): nothing written; "
                "roll back, its effects are the other delivery's to commit"
            )

    return complete


def completed_here(table: JobTable, job: ReservedJob) -> bool:
    """After a handler that called ``job.complete``: True when its transaction committed
    (the row is gone), False when it rolled back (the job is still held: settle it as
    usual — fenced, so a takeover meanwhile makes that settlement stale, not a double)."""
    try:
        return table.gone(job)
    except StoreError as exc:
        # Unknown: settle as usual; the fenced write tells (stale when it was completed).
        logger.warning("could not read whether job %s was completed: %s", job.id, exc)
        return False


__all__ = ["completed_here", "completer"]
