"""Laravel and Python on one queue: Laravel's payloads, a worker for Laravel jobs, dispatch.

PHP's serialize format and Laravel's job JSON (``laravel_bridge.payload``), a worker that
runs Laravel jobs with Python handlers (``laravel_bridge.worker``, ``laravel-bridge work``)
and :class:`LaravelQueue` to dispatch jobs Laravel's worker runs, over
Laravel's ``jobs`` table or contract v1's. Kombu is not needed to use it.
"""

from __future__ import annotations

from .dispatch import Dispatched, LaravelQueue
from .encryption import Encrypter
from .exceptions import (
    DecryptError,
    EncryptionKeyError,
    LaravelBridgeError,
    PayloadError,
)
from .handlers import HandlerRegistry, handles
from .job import Job, MalformedJob
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
from .tables import JobTable, open_table
from .worker import JobTimedOut, MaxAttemptsExceeded, Worker, WorkerOptions

__all__ = [
    "DecryptError",
    "Dispatched",
    "Encrypter",
    "EncryptionKeyError",
    "HandlerRegistry",
    "Job",
    "JobCommand",
    "JobTable",
    "JobTimedOut",
    "LaravelBridgeError",
    "LaravelQueue",
    "MalformedJob",
    "MaxAttemptsExceeded",
    "ModelIdentifier",
    "Payload",
    "PayloadError",
    "PhpEnum",
    "PhpObject",
    "PhpReference",
    "PhpSerializable",
    "PhpSerializeError",
    "Worker",
    "WorkerOptions",
    "dumps",
    "handles",
    "loads",
    "open_table",
    "private",
    "protected",
]
