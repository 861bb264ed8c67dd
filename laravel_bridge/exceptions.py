"""The one exception tree of :mod:`laravel_bridge`. A class's docstring is its default message."""

from __future__ import annotations


class LaravelBridgeError(Exception):
    """laravel_bridge failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class PhpSerializeError(LaravelBridgeError, ValueError):
    """Input is not valid PHP ``serialize()`` data, or a value cannot be serialized."""


class PayloadError(LaravelBridgeError, ValueError):
    """A Laravel queue payload is malformed (not JSON, not an object, or missing a key)."""


class EncryptionKeyError(LaravelBridgeError, ValueError):
    """The app key does not fit the cipher (wrong length, or not base64 after ``base64:``)."""


class DecryptError(LaravelBridgeError, ValueError):
    """An encrypted payload is malformed, was tampered with, or was encrypted with another key."""


class PayloadTooDeep(PhpSerializeError, PayloadError):
    """A value nests arrays/objects deeper than the documented limit (PHP or JSON nesting)."""


class PayloadTooLarge(PayloadError):
    """A stored payload is larger than the worker reads (``WorkerOptions.max_payload``)."""
