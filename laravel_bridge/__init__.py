"""Read and write Laravel queue payloads from Python: PHP's serialize format, Laravel's job JSON.

Pure Python; Kombu is not needed to use it.
"""

from __future__ import annotations

from .php_serialize import (
    PhpEnum,
    PhpObject,
    PhpReference,
    PhpSerializable,
    PhpSerializeError,
    dumps,
    loads,
    private,
    protected,
)

__all__ = [
    "PhpEnum",
    "PhpObject",
    "PhpReference",
    "PhpSerializable",
    "PhpSerializeError",
    "dumps",
    "loads",
    "private",
    "protected",
]
