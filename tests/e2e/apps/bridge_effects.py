"""Handlers for ``laravel-bridge work`` in the e2e fault runs (``--handlers
apps.bridge_effects``): ``App\\Jobs\\Effect`` writes one effect row in the queue's database
and — ``E2E_COMPLETES=1`` — completes its job in that transaction (``job.complete``), with
work before and after it. Environment: ``E2E_DB_URL``, the queue's database."""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

from kombu_sqlqueue.store import parse_store_url
from laravel_bridge import Job, handles

ENGINE = sa.create_engine(parse_store_url(os.environ["E2E_DB_URL"])[1])
COMPLETES = os.environ.get("E2E_COMPLETES") == "1"
INSERT = sa.text("INSERT INTO effects (label, pid) VALUES (:label, :pid)")


@handles("App\\Jobs\\Effect")
def effect(job: Job) -> None:
    time.sleep(0.005)  # work before the transaction
    with ENGINE.begin() as conn:
        conn.execute(INSERT, {"label": job.properties["label"], "pid": os.getpid()})
        if COMPLETES:
            job.complete(conn)
    time.sleep(0.005)  # and after it
