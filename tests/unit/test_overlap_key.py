"""``JobCommand.overlap_key`` reads whatever a payload's ``middleware`` holds without
raising: hostile shapes (not a list, other classes, keys that are arrays, objects, huge or
binary strings) give None or a string, never an error; and a stored key always fits."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kombu_sqlqueue.store.controls import MAX_KEY_LENGTH, check_concurrency_key, fit_concurrency_key
from laravel_bridge.payload import WITHOUT_OVERLAPPING, JobCommand
from laravel_bridge.php_serialize import PhpObject

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=600),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
)  # fmt: skip
values: Any = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=3),
        st.builds(
            PhpObject,
            st.sampled_from([WITHOUT_OVERLAPPING, "\\" + WITHOUT_OVERLAPPING, "Other\\Thing"]),
            st.dictionaries(st.sampled_from(["key", "prefix", "shareKey", "x"]), inner, max_size=4),
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(middleware=values)
def test_any_middleware_gives_a_key_or_none(middleware: Any) -> None:
    command = JobCommand(PhpObject("App\\Jobs\\A", {"middleware": middleware}))
    key = command.overlap_key
    assert key is None or isinstance(key, str)
    if key is not None:
        fitted = fit_concurrency_key(key) if key else None
        if fitted is not None:
            assert len(fitted) <= MAX_KEY_LENGTH and check_concurrency_key(fitted) == fitted


@settings(max_examples=200, deadline=None)
@given(key=st.text(st.characters(exclude_categories=()), min_size=1, max_size=2000))
def test_a_fitted_key_is_stable_and_keeps_distinct_keys_apart(key: str) -> None:
    fitted = fit_concurrency_key(key)
    assert fitted == fit_concurrency_key(key) and check_concurrency_key(fitted) == fitted
    assert fit_concurrency_key(key + "!") != fitted or len(key) > 200


def test_a_key_with_a_lone_surrogate_or_nul_is_fitted_to_text() -> None:
    for key in ("a\ud800b", "nul\x00here", ""):
        fitted = fit_concurrency_key(key)
        assert check_concurrency_key(fitted) == fitted and fitted.encode("utf-8")
