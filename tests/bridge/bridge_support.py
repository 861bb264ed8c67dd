"""Constants shared by the tests of laravel_bridge's worker and dispatch."""

from __future__ import annotations

#: A Laravel app key (32 bytes, base64) for encrypted jobs.
APP_KEY = "base64:" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="
