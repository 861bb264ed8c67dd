"""The one exception tree of :mod:`kombu_sqlqueue`.

Every error a user can meet derives from :class:`SqlQueueError`. Database
driver errors (``sqlite3``, ``psycopg``, ``pymysql``) are wrapped where the
store calls the database, so transport code only ever sees these classes.
A class's docstring is its default message.
"""

from __future__ import annotations


class SqlQueueError(Exception):
    """kombu-sqlqueue failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(SqlQueueError, ValueError):
    """The transport or store is configured wrongly."""


class InvalidURL(ConfigurationError):
    """The broker URL cannot be used by kombu-sqlqueue."""


class EnlistError(ConfigurationError):
    """``enlist()`` was given something that is not a database connection it can join."""


class WrongDatabase(ConfigurationError):
    """An enlisted publish's connection is to another database than the broker's: nothing
    was written, here or there."""


class NotCompletable(ConfigurationError):
    """``complete()`` found no delivery of kombu-sqlqueue to settle here: outside a task, a
    task run eagerly or from another broker, a job of a queue format's table, or a
    connection with no open transaction."""


class WriteLockHeld(ConfigurationError):
    """On SQLite (one writer at a time), this thread's own open transaction — an ``enlist``
    block's, or the one a task completed in — holds the database's write lock, and a message
    that is never written in it (a task's retry) was sent meanwhile: it would wait for that
    lock until the busy timeout ran out, again and again. Nothing was written: send it after
    the transaction ends."""


class DeliveryLost(SqlQueueError):
    """``complete()``: the delivery is no longer this task's — its reservation lapsed and
    another consumer took the job, or it was settled already. Nothing was written: roll
    the transaction back, its effects are the other delivery's to commit."""


class DatabaseMissing(ConfigurationError):
    """The database (an SQLite file) does not exist; an operator command creates nothing."""


class UnknownQueue(SqlQueueError, ValueError):
    """No job, dead letter or binding names this queue."""


class UnknownFailedJob(SqlQueueError, LookupError):
    """No failed job has this id or uuid."""


class UnknownTransportOption(ConfigurationError):
    """A transport option is not one kombu-sqlqueue knows."""


class InvalidQueueName(SqlQueueError, ValueError):
    """A queue name is empty, too long, or holds a control character."""


class InvalidControl(SqlQueueError, ValueError):
    """A flow control (a pause, a limit) is not one a queue can have: a duration that is
    not one, a limit that is not a positive whole number."""


class ClaimLimitExceeded(SqlQueueError, ValueError):
    """A claim asked for more jobs than one claim may hand out."""


class StoreError(SqlQueueError):
    """The job store's database reported an error."""


class StoreConnectionError(StoreError, ConnectionError):
    """The job store lost, or could not open, its database connection."""


class StoreBusyError(StoreConnectionError):
    """The database stayed locked by other writers past the busy timeout."""


class StoreConditionError(StoreError):
    """The database refused a write for a condition of its own, which reconnecting does not cure.

    Raised at once (no reconnect loop); the message names the database and what to do.
    A consumer logs it and keeps polling, so it resumes when the condition clears.
    """


class StoreFullError(StoreConditionError):
    """The database is full: its disk, or a size limit set on it."""


class StoreReadOnlyError(StoreConditionError):
    """The database is read-only: a read-only file, mount, replica or server setting."""


class StorePermissionError(StoreConditionError, PermissionError):
    """The database refused access: file permissions, or the user lacks a privilege."""


class MessageTooLarge(StoreConditionError, ValueError):
    """A message is larger than the database accepts in one statement."""


class SchemaMismatch(StoreError):
    """The job tables exist but lack columns contract v1 (and this package) needs."""


class MalformedMessage(SqlQueueError, ValueError):
    """A stored row's payload is not a message this transport can read."""


class PayloadLimitExceeded(MalformedMessage):
    """A stored payload is past a documented limit (nesting depth, size)."""
