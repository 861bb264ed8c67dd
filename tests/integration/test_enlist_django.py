"""``enlist()`` with no connection joins Django's, and the transport option ``django_atomic``
enlists every publish made inside ``transaction.atomic()`` — in a real Django (settings are
process-wide, so each case runs in a process of its own), on SQLite and PostgreSQL (Django's
MySQL backend wants mysqlclient, which the tests do not install)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Django configured on the database argv[1] names (argv[2]: the mode of the case).
DJANGO = r"""
import json, sys
from urllib.parse import urlsplit
import django
from django.conf import settings
url, mode = sys.argv[1], sys.argv[2]
p = urlsplit(url)
if p.scheme == "sqlite":
    db = {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///"),
          "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"}}
else:
    db = {"ENGINE": "django.db.backends.postgresql", "NAME": p.path.lstrip("/"),
          "USER": p.username or "", "HOST": p.hostname, "PORT": str(p.port)}
settings.configure(DATABASES={"default": db}, INSTALLED_APPS=[], USE_TZ=True)
django.setup()
"""

SCRIPT = (
    DJANGO
    + r"""
from celery import Celery
from django.db import connection, transaction
from kombu_sqlqueue import enlist
from kombu_sqlqueue.store import JobStore
options = {"django_atomic": "default"} if mode == "option" else {}
app = Celery("dj", broker="sqlqueue+" + url, set_as_current=False)
app.conf.broker_transport_options = options
queue = JobStore(url)
queue.ensure_ready()
with connection.cursor() as c:
    c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
def send(note):
    if mode == "option":
        app.send_task("t.note", (note,))
    else:
        with enlist():
            app.send_task("t.note", (note,))
seen = {}
class Rollback(Exception):
    pass
try:
    with transaction.atomic():
        with connection.cursor() as c:
            c.execute("INSERT INTO orders (id, note) VALUES (1, 'rolled back')")
        send("rolled back")
        seen["inside"] = queue.backlog("celery").total
        raise Rollback
except Rollback:
    pass
seen["after_rollback"] = queue.backlog("celery").total
with transaction.atomic():
    with connection.cursor() as c:
        c.execute("INSERT INTO orders (id, note) VALUES (2, 'kept')")
    with transaction.atomic():  # a savepoint rolled back: its task with it
        send("savepoint")
        transaction.set_rollback(True)
    send("kept")
seen["after_commit"] = queue.backlog("celery").total
send("autocommit")  # outside atomic(): written at once, as without enlist
seen["autocommit"] = queue.backlog("celery").total
print(json.dumps(seen))
"""
)


@pytest.mark.parametrize("engine_name", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("mode", ["enlist", "option"])
def test_django_atomic_blocks_carry_their_tasks(db_url: str, mode: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, db_url, mode],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"inside": 0, "after_rollback": 0, "after_commit": 1, "autocommit": 2}


COMPLETE_SCRIPT = (
    DJANGO
    + r"""
from contextlib import contextmanager
from types import SimpleNamespace
from django.db import connection, transaction
from kombu import Connection
from kombu_sqlqueue import complete
from kombu_sqlqueue.store import JobStore
broker_url = "sqlqueue+" + url

class Pool:
    @contextmanager
    def acquire(self, block=True):
        c = Connection(broker_url)
        c.connect()
        try:
            yield c
        finally:
            c.release()

def task_of(message):
    request = SimpleNamespace(properties=message.properties, is_eager=False, id="t")
    return SimpleNamespace(app=SimpleNamespace(pool=Pool()), name="t.charge", request=request)

def effects():
    with connection.cursor() as c:
        c.execute("SELECT note FROM effects ORDER BY note")
        return [r[0] for r in c.fetchall()]

store = JobStore(url)
store.ensure_ready()
with connection.cursor() as c:
    c.execute("CREATE TABLE effects (note TEXT)")
seen = {}
consumer = Connection(broker_url)
queue = consumer.SimpleQueue("effects")
queue.put("first")
first = queue.get(timeout=5)
with transaction.atomic():  # complete() with no connection: Django's, in this atomic()
    with connection.cursor() as c:
        c.execute("INSERT INTO effects (note) VALUES ('first')")
    complete(task=task_of(first))
first.ack()  # Celery's late ack after: finds the job gone, counted
seen["first"] = [effects(), store.backlog("effects").total,
                 consumer.transport.pending.settled_elsewhere]
queue.put("second")
second = queue.get(timeout=5)
with transaction.atomic():
    with connection.cursor() as c:
        c.execute("INSERT INTO effects (note) VALUES ('outer')")
    with transaction.atomic():  # a savepoint: the completion rolled back with it
        complete(task=task_of(second))
        transaction.set_rollback(True)
seen["savepoint"] = [effects(), store.backlog("effects").total]
with transaction.atomic():  # still held: completed again, for good this time
    complete(task=task_of(second))
second.ack()
seen["second"] = [effects(), store.backlog("effects").total,
                  consumer.transport.pending.settled_elsewhere]
queue.close()
consumer.release()
print(json.dumps(seen))
"""
)


@pytest.mark.parametrize("engine_name", ["sqlite", "postgresql"], indirect=True)
def test_complete_with_no_connection_writes_in_djangos_atomic_block(db_url: str) -> None:
    """``complete()`` with no connection completes in Django's ``atomic()`` block; a
    savepoint rolled back after it takes the completion with it (the delivery stays held
    and completes later)."""
    done = subprocess.run(
        [sys.executable, "-c", COMPLETE_SCRIPT, db_url, "complete"],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "first": [["first"], 0, 1],
        "savepoint": [["first", "outer"], 1],
        "second": [["first", "outer"], 0, 2],
    }
