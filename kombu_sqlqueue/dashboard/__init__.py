"""The web dashboard (``kombu-sqlqueue dashboard``, the ``[dashboard]`` extra): see
:mod:`kombu_sqlqueue.dashboard.app`."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
