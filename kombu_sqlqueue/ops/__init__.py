"""Operator tooling: the ``kombu-sqlqueue`` CLI (:mod:`.cli`), the Prometheus exporter
(:mod:`.metrics`), and what both share — opening a database's tables of either layout
for an operator (:mod:`.connect`) and showing a stored job to a person (:mod:`.summary`).

It sits on top of the store, and reaches another package's table layout only through
the store's registry of them (:mod:`kombu_sqlqueue.store.layouts`). It holds no SQL (the
verbs are the store's ``QueueAdmin`` or a layout's) and never runs jobs.
"""

from __future__ import annotations

from .connect import open_admin, store_url

__all__ = ["open_admin", "store_url"]
