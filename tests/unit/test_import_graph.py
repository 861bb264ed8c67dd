"""The layers of ARCHITECTURE.md, checked: imports run one way, and no module imports
itself back (type-only imports count: a circle under ``TYPE_CHECKING`` is still a circle
a reader has to untangle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kombu_sqlqueue", "laravel_bridge")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports() -> dict[str, set[str]]:
    """Module → every module it imports (ours and others', top-level and nested)."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = _module_name(path)
            here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            found: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = here[: len(here) - (node.level - 1)]
                        target = ".".join([*base, *([node.module] if node.module else [])])
                    else:
                        target = node.module or ""
                    for alias in node.names:  # `from . import php_serialize` is a module
                        sub = f"{target}.{alias.name}"
                        found.add(sub if _is_module(sub) else target)
            graph[name] = found - {name}
    return graph


def ours(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {d for d in deps if d in graph} for m, deps in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    path: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                found.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def test_the_checker_sees_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    assert cycles(ours(imports())) == []


def _third_party(deps: set[str], top: str) -> set[str]:
    return {d for d in deps if d == top or d.startswith(top + ".")}


@pytest.mark.parametrize("forbidden", ["kombu", "celery"])
def test_the_store_knows_no_kombu(forbidden: str) -> None:
    graph = imports()
    offenders = {
        m: _third_party(deps, forbidden)
        for m, deps in graph.items()
        if m.startswith("kombu_sqlqueue.store") and _third_party(deps, forbidden)
    }
    assert offenders == {}


#: The bridge's modules allowed a third-party library the rest of it does without: its SQL
#: (Laravel's tables, on the store's machinery), and the queue format the Kombu transport
#: loads with the Celery signal handler beside it — the bridge's Kombu/Celery side.
BRIDGE_SEAMS = {
    "laravel_bridge.sql": {"sqlalchemy"},
    "laravel_bridge.laravel_tables": {"sqlalchemy"},
    "laravel_bridge.messages": {"kombu"},
    "laravel_bridge.celery_message": {"kombu"},
    "laravel_bridge.celery_signals": {"kombu", "celery"},
}


def test_the_bridge_needs_neither_kombu_nor_sql() -> None:
    graph = imports()
    offenders = {
        m: {
            d
            for d in deps
            if d.split(".")[0] in ("kombu", "celery", "sqlalchemy")
            and d.split(".")[0] not in BRIDGE_SEAMS.get(m, set())
        }
        for m, deps in graph.items()
        if m.startswith("laravel_bridge")
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_only_the_transport_loads_the_bridges_kombu_side() -> None:
    """``import laravel_bridge`` (its worker, dispatch, CLI) needs no Kombu: no module of
    the bridge imports the format or the signal handler, except each other."""
    kombu_side = {
        "laravel_bridge.messages",
        "laravel_bridge.celery_message",
        "laravel_bridge.celery_signals",
    }
    graph = ours(imports())
    offenders = {
        m: deps & kombu_side
        for m, deps in graph.items()
        if m.startswith("laravel_bridge") and m not in kombu_side
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_store_never_imports_the_layers_above_it() -> None:
    graph = ours(imports())
    above = {m for m in graph if m.startswith("laravel_bridge")} | {
        m
        for m in graph
        if m.startswith("kombu_sqlqueue.")
        and not m.startswith("kombu_sqlqueue.store")
        # the package-wide leaves every layer shares
        and m not in ("kombu_sqlqueue.exceptions", "kombu_sqlqueue.limits")
    }
    offenders = {
        m: deps & above for m, deps in graph.items() if m.startswith("kombu_sqlqueue.store")
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_transport_holds_no_sql() -> None:
    graph = imports()
    offenders = {
        m: _third_party(deps, "sqlalchemy")
        for m, deps in graph.items()
        if m.startswith("kombu_sqlqueue") and not m.startswith("kombu_sqlqueue.store")
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_nothing_in_kombu_sqlqueue_imports_the_bridge() -> None:
    """The bridge is a plug-in: the transport reaches its queue format, the operator's
    tools its table layout, by entry point (``kombu_sqlqueue.formats``,
    ``kombu_sqlqueue.layouts``), never by import."""
    graph = imports()
    offenders = {
        m: {d for d in deps if d.split(".")[0] == "laravel_bridge"}
        for m, deps in graph.items()
        if m.startswith("kombu_sqlqueue")
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def laravel_names(source: str) -> set[str]:
    """Identifiers and string literals (docstrings aside) of ``source`` that name Laravel:
    knowledge of it in code, where a comment or a docstring may only compare."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg | ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.name, node.asname or ""]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            names = [node.value]
        found.update(n for n in names if "laravel" in n.lower())
    return found


def test_the_checker_sees_laravel_names() -> None:
    source = 'import laravel_bridge\nx = "laravel"\ndef f(laravel_jobs): return q.laravel_pop\n'
    assert laravel_names(source) == {"laravel_bridge", "laravel", "laravel_jobs", "laravel_pop"}
    assert laravel_names('"""Laravel\'s queue:failed, compared."""\n# Laravel\n') == set()


def test_kombu_sqlqueue_names_no_laravel() -> None:
    """No identifier, SQL or other string of ``kombu_sqlqueue`` names Laravel: its tables,
    statements and rules are the bridge's (``laravel_bridge/sql.py``, ``layout.py``)."""
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "kombu_sqlqueue").rglob("*.py"))
        if (found := laravel_names(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_every_contract_store_screens_its_claims_with_the_one_rule() -> None:
    """One claim screen (``store/claiming.py``): the SQL store and the memory store both
    use it, and neither defines the claim rules (TTL, attempts limit) again."""
    graph = imports()
    for store in ("kombu_sqlqueue.store.store", "kombu_sqlqueue.store.memory"):
        assert "kombu_sqlqueue.store.claiming" in graph[store], store
        source = (ROOT / (store.replace(".", "/") + ".py")).read_text(encoding="utf-8")
        assert "claim_limit(" not in source and "def screen" not in source, store
