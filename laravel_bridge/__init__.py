"""Read and write Laravel queue payloads from Python: PHP's serialize format, Laravel's job JSON.

Pure Python; Kombu is not needed to use it.
"""

from __future__ import annotations

from .encryption import Encrypter
from .exceptions import (
    DecryptError,
    EncryptionKeyError,
    LaravelBridgeError,
    PayloadError,
)
from .payload import JobCommand, ModelIdentifier, Payload
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
    "DecryptError",
    "Encrypter",
    "EncryptionKeyError",
    "JobCommand",
    "LaravelBridgeError",
    "ModelIdentifier",
    "Payload",
    "PayloadError",
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
