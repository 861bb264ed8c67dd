"""Operator tooling: the ``kombu-sqlqueue`` CLI (:mod:`.cli`), the Prometheus exporter
(:mod:`.metrics`), and what both share — opening a database's tables of either layout
for an operator (:mod:`.connect`) and showing a stored job to a person (:mod:`.summary`).

It sits on top of the store and of ``laravel_bridge``'s tables: the one part of
``kombu_sqlqueue`` that imports the bridge. It holds no SQL (the verbs are the store's
``QueueAdmin``) and never runs jobs.
"""

from __future__ import annotations

from .connect import LAYOUTS, open_admin, store_url

__all__ = ["LAYOUTS", "open_admin", "store_url"]
