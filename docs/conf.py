"""Sphinx configuration of the documentation site (``scripts/docs`` builds it into ``site/``).

The pages are Markdown read by MyST, so they read the same on the repository; the API
reference comes from the docstrings, which are reStructuredText (``:class:`` roles) for autodoc.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kombu_sqlqueue import __version__  # noqa: E402

project = "kombu-sqlqueue"
author = "the kombu-sqlqueue developers"
copyright = "2026, the kombu-sqlqueue developers"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_copybutton",
    "sphinxcontrib.mermaid",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "*.json"]

# Markdown: links to headings (`semantics.md#bad-rows`) resolve like GitHub's anchors.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist", "attrs_inline"]
# ```mermaid blocks (the state diagram in semantics.md) become diagrams, drawn in the page.
myst_fence_as_directive = ["mermaid"]
mermaid_height = "640px"  # the life of a job has 17 arrows: the 500px default squeezes them

# Every cross-reference must resolve (`-n`), except to libraries whose inventories we
# cannot fetch at build time (no intersphinx: CI reaches package registries only).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(sqlalchemy|sa|kombu|celery|click|prometheus_client|psycopg|pymysql)(\..*)?"),
    (r"py:.*", r"(typing|collections|datetime|decimal|enum|pathlib|threading|random|re)\..*"),
    # Internal tables and stores that public signatures name; they are not public API.
    (r"py:class", r"Database|memory\..*|laravel_bridge\.laravel_tables\..*|.*\.enlist\.Enlistment"),
    # Type aliases and type variables: autodoc shows their names, they have no page.
    (r"py:.*", r"(laravel_bridge\.handlers\.)?(F|Handler|UniqueId)"),
]

autodoc_member_order = "bysource"
# Types in the signature; a parameter's line in the description only where a docstring
# documents it (a dataclass's fields are documented one by one below its signature).
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_default_options = {"members": True}

html_theme = "furo"
html_title = f"kombu-sqlqueue {release}"
html_static_path: list[str] = []
html_show_sourcelink = False


# -- the benchmark plot, drawn from the benchmark's JSON at every build -------------------------
# benchmarks.md shows scale.png, which bench_scale.py drew after its run (the repository shows
# that one). The site draws it again from the committed docs/scale.json and shows that copy,
# so its figure cannot drift from the report the tables quote.
GENERATED = DOCS / "_generated"


def _draw_plots(app: Any) -> None:
    from scale_plot import plot_file

    plot_file(DOCS / "scale.json", GENERATED / "scale.png")


def _use_drawn_plot(app: Any, docname: str, source: list[str]) -> None:
    if docname == "benchmarks":
        source[0] = source[0].replace("](scale.png)", "](_generated/scale.png)")


def setup(app: Any) -> None:
    app.connect("builder-inited", _draw_plots)
    app.connect("source-read", _use_drawn_plot)
