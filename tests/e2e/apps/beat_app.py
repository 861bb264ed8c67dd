"""A Celery app with one periodic task a second, for ``celery beat`` processes with the
database scheduler (tests/e2e/test_beat.py). No worker runs it: each tick is a message on
the ``beat-ticks`` queue, counted in the table.

* ``E2E_BROKER_URL`` — the broker (``sqlqueue+…``)
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery("beat_app", broker=os.environ["E2E_BROKER_URL"])
app.conf.update(
    beat_scheduler="kombu_sqlqueue.beat:DatabaseScheduler",
    beat_max_loop_interval=1,
    beat_schedule={
        "tick": {"task": "beat_app.tick", "schedule": 1.0, "options": {"queue": "beat-ticks"}},
    },
    broker_connection_retry_on_startup=True,
)


@app.task(name="beat_app.tick")
def tick() -> None:
    pass
