"""The store's errors, and each driver error named by what it is, once, where the driver raised it.

An outage (the connection, a timeout, a serialisation failure or deadlock, a server shutting
down or out of resources) is `StoreUnavailable`: retryable, nothing was written. Data the store
refuses for good is permanent, answered without a retry hint and logged here, once:
text it cannot hold (PostgreSQL text and NUL) is `StoreTextRefused` (INVALID_ARGUMENT), a number
past its range or a constraint violation that is not the protocol's own (those are answered by
`ON CONFLICT` and never raise) is `StoreDataRefused` (FAILED_PRECONDITION). The messages name
the error's class and SQLSTATE only: a server's text can quote row data.
"""

from __future__ import annotations

import logging
import sqlite3

from effectgate.gateway.model import DataRefused, InvalidRequest

log = logging.getLogger("effectgate.store")


class StoreError(Exception):
    """Base of store errors."""


class StoreUnavailable(StoreError):
    """The store cannot be read or written durably now. Nothing may be sent to a provider."""


class StoreDataRefused(StoreError, DataRefused):
    """The store refused the data for good (a number past its range, a constraint violation that
    is not the protocol's own): not an outage, answered FAILED_PRECONDITION and never retried."""


class StoreTextRefused(StoreError, InvalidRequest):
    """The store cannot hold a character of some text (PostgreSQL text and NUL): INVALID_ARGUMENT.
    The RPC edge refuses such text first, naming the field; this is the store's own word."""


class StoreRefused(StoreError):
    """The store answers but refuses us for a reason waiting cannot fix: a wrong password, a
    missing database, a role that may not change a schema that is behind. `serve` ends at once."""


class SchemaBehind(StoreRefused):
    """Migrations are missing and this process may not apply them (`[store] migrate = "never"`)."""


# SQLSTATEs of text PostgreSQL cannot hold: 22021 character_not_in_repertoire (NUL),
# 22P05 untranslatable_character, 22P02 invalid_text_representation.
_TEXT_STATES = frozenset({"22021", "22P05", "22P02"})


def postgres_error(exc: BaseException) -> StoreError:
    """What an asyncpg (or socket) error raised by a statement is."""
    # Imported here: asyncpg is the `postgres` extra's, and only its store calls this.
    from asyncpg.exceptions import _base as asyncpg_base

    state = str(getattr(exc, "sqlstate", "") or "")
    name = type(exc).__name__
    if state in _TEXT_STATES:
        return _refused(StoreTextRefused([("request", f"holds text the store cannot keep ({name})")]), exc)
    if state.startswith(("22", "23")) or isinstance(exc, asyncpg_base.DataError | OverflowError):
        # 22: data exceptions (numeric_value_out_of_range, ...); 23: integrity constraints.
        # The driver's own DataError: an argument the driver cannot encode (an int past 64 bits).
        return _refused(StoreDataRefused(f"the store refused the data for good ({name} {state})".strip()), exc)
    error = StoreUnavailable(f"PostgreSQL unavailable: {name}")
    error.__cause__ = exc
    return error


def sqlite_error(what: str, exc: BaseException) -> StoreError:
    """What an sqlite3 (or parameter binding) error raised by a statement is."""
    name = type(exc).__name__
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError | OverflowError):
        return _refused(StoreDataRefused(f"the store refused the data for good ({name})"), exc)
    error = StoreUnavailable(f"SQLite {what}: {exc}")
    error.__cause__ = exc
    return error


def _refused(error: StoreError, exc: BaseException) -> StoreError:
    log.error("store refused data: %s (permanent; the call is answered, not retried)", error)
    error.__cause__ = exc
    return error
