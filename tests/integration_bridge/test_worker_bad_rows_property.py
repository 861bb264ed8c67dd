"""Property (hypothesis): whatever a stored payload holds, ``Worker.process`` settles the row
and returns — and a row it fails was understood, not caught by the safety net.

Stored payloads: random bytes (as text or as a BLOB), random JSON of random depth (past
MAX_JSON_DEPTH too), and real Laravel payloads built with ``Payload.build`` then mutated
(a key set to a random value or removed, bytes flipped, the command cut, nested or
replaced). SQLite only: its TEXT column holds everything another writer could leave.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import sqlalchemy as sa
from bridge_support import failed_rows, insert_raw, raw_engine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from laravel_support import APP_KEY

from laravel_bridge import Encrypter, HandlerRegistry, JobCommand, Payload, Worker, WorkerOptions
from laravel_bridge.payload import PLUMBING
from laravel_bridge.tables import LAYOUTS, open_table

KNOWN = ["App\\Jobs\\Good", "App\\Jobs\\Other", "X"]


def nested(ints: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        ints,
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=6), children, max_size=4),
        ),
        max_leaves=12,
    )


#: Any JSON value (integers past 64 bits too), and what PHP can hold (a job's properties).
json_values = nested(st.integers(min_value=-(2**70), max_value=2**70))
php_values = nested(st.integers(min_value=-(2**63), max_value=2**63 - 1))


@st.composite
def deep_json(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(min_value=0, max_value=600))
    inner = json.dumps(draw(json_values))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    return (opener * depth + inner + closer * depth).encode()


@st.composite
def laravel_payloads(draw: st.DrawFn) -> bytes:
    """A real payload (as dispatch writes it), then mutated."""
    name = draw(st.sampled_from([*KNOWN, "App\\Jobs\\PhpOnly"]))
    # A job's own property names: never one of the traits' (job, queue, delay …), which
    # JobCommand.build refuses (hypothesis found "job").
    own_names = st.from_regex(r"[a-z]{1,6}", fullmatch=True).filter(lambda k: k not in PLUMBING)
    props = draw(st.dictionaries(own_names, php_values))
    chained = draw(st.lists(st.sampled_from(KNOWN), max_size=2))
    command = JobCommand.build(
        name, props, chained=[JobCommand.build(c, {"n": 1}) for c in chained]
    )
    encrypter = Encrypter(APP_KEY) if draw(st.booleans()) else None
    data = Payload.build(command, encrypter=encrypter, max_tries=draw(st.integers(0, 3))).data
    mutation = draw(st.sampled_from(["none", "set", "drop", "command", "bytes"]))
    if mutation == "set":
        key = draw(st.sampled_from([*data, "data"]))
        target = data["data"] if key == "data" and draw(st.booleans()) else data
        target[draw(st.sampled_from(["commandName", "command"])) if target is not data else key] = (
            draw(json_values)
        )
    elif mutation == "drop":
        data.pop(draw(st.sampled_from(sorted(data))))
    elif mutation == "command":
        text = data["data"]["command"]
        how = draw(st.sampled_from(["cut", "byte", "nest", "garbage"]))
        if how == "cut":
            text = text[: draw(st.integers(0, len(text)))]
        elif how == "byte" and text:
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + draw(st.characters()) + text[at + 1 :]
        elif how == "nest":
            depth = draw(st.integers(0, 300))
            deep = "a:1:{i:0;" * depth + "N;" + "}" * depth
            text = text.replace('s:3:"job";N;', f's:3:"job";{deep}')
        else:
            text = draw(st.text(max_size=40))
        data["data"]["command"] = text
    raw = json.dumps(data).encode()
    if mutation == "bytes" and raw:
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(raw) - 1))
            raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    return raw


stored_payloads = st.tuples(
    st.one_of(st.binary(max_size=300), deep_json(), laravel_payloads()),
    st.booleans(),  # stored as a BLOB
)


def _left_reserved(engine: sa.engine.Engine, layout: str, queue: str) -> int:
    if layout == "laravel":
        sql = "SELECT COUNT(*) FROM jobs WHERE queue = :q AND reserved_at IS NOT NULL"
    else:
        sql = "SELECT COUNT(*) FROM askr_jobs WHERE queue = :q AND reserved_token IS NOT NULL"
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql), {"q": queue}).scalar_one())


@pytest.mark.timeout(300, method="thread")  # the worker owns SIGALRM
@pytest.mark.parametrize("layout", LAYOUTS)
def test_any_stored_payload_is_settled_and_process_never_raises(tmp_path: Any, layout: str) -> None:
    table = open_table(f"sqlite:///{tmp_path / 'queue.db'}", layout)
    engine = raw_engine(table)
    ran: list[str] = []
    registry = HandlerRegistry()
    for name in KNOWN:
        registry.register(name, lambda job: ran.append(job.uuid))
    options = WorkerOptions(unknown_jobs="fail", timeout=0)
    worker = Worker(table, options, handlers=registry, app_key=APP_KEY)
    queues = (f"q{n}" for n in itertools.count())

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(stored=stored_payloads)
    def check(stored: tuple[bytes, bool]) -> None:
        raw, blob = stored
        queue = next(queues)
        insert_raw(table, queue, raw, blob=blob, engine=engine)
        job = table.pop(queue, 90)
        assert job is not None
        ran_before = len(ran)
        worker.process(job)  # the property: returns, whatever the row holds
        assert _left_reserved(engine, layout, queue) == 0  # settled, not left held
        failed = failed_rows(table, queue, engine=engine)
        if failed:
            (row,) = failed
            assert row["payload"] == raw  # exactly as stored
            assert "unforeseen" not in row["exception"], row["exception"][:500]
        else:  # it ran (and was deleted), or it ran, its chain failed and it was released
            assert len(ran) == ran_before + 1

    try:
        check()
    finally:
        engine.dispose()
        table.close()
