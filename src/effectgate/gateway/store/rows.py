"""Row mapping, paging and cursors: how an `ActionRecord` lives in the `actions` table, once for
every SQL backend.

A row is the columns the store queries on plus the whole record as one versioned JSON body
(`codec`). The lease columns are authoritative: taking a lease writes only them, and they are laid
over the body's copies when a row is read, on every backend alike.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Sequence
from typing import Any

from effectgate.gateway.model import ActionRecord, ListQuery, Page
from effectgate.gateway.store import codec

# Insert order of `values()`; `SELECTED` is what every read returns, in `record()`'s order.
COLUMNS = (
    "action_id",
    "tenant",
    "run_id",
    "tool",
    "state",
    "fence",
    "lease_owner",
    "lease_expires_at",
    "next_check_at",
    "created_at",
    "updated_at",
    "body",
)
SELECTED = "body, fence, lease_owner, lease_expires_at"

__all__ = ["COLUMNS", "SELECTED", "decode_cursor", "encode_cursor", "page", "page_size", "record", "values"]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000

# Decoding the body is most of what a read costs, and the same body is read again and again (the
# approval expiry's scan on every tick, a waiting caller's polls, replays of a settled action):
# a record is immutable, so one decoded record serves every read of the same body. A body that
# does not decode (a newer schema, a corrupt row) raises every time, as before: errors are not kept.
_decoded = functools.lru_cache(maxsize=1024)(codec.decode)


def values(r: ActionRecord) -> tuple[Any, ...]:
    """The row for `r`, in `COLUMNS` order."""
    return (
        r.action_id,
        r.tenant,
        r.run_id,
        r.tool,
        r.state.value,
        r.fence,
        r.lease_owner,
        r.lease_expires_at,
        r.next_check_at,
        r.created_at,
        r.updated_at,
        codec.encode(r),
    )


def record(row: Sequence[Any]) -> ActionRecord:
    """The record of a row selected as `SELECTED`, lease columns laid over the body."""
    decoded = _decoded(row[0])
    fence, owner, expires = row[1], row[2], float(row[3])
    if (decoded.fence, decoded.lease_owner, decoded.lease_expires_at) == (fence, owner, expires):
        return decoded
    return decoded.evolve(fence=fence, lease_owner=owner, lease_expires_at=expires)


def readable(found: Sequence[Sequence[Any]]) -> list[ActionRecord]:
    """The records of a background job's batch (the reconciler's claim, the approvals' expiry),
    leaving out those a newer gateway wrote (a rolling upgrade): this replica cannot drive them,
    and one of them must not fail the rest of the batch. A replica of the newer release takes them
    (a reconciler's claim on them lapses with its lease); every RPC on them here answers
    RECORD_VERSION_TOO_NEW."""
    records = []
    for row in found:
        try:
            records.append(record(row))
        except codec.SchemaVersionError:
            continue
    return records


def page_size(query: ListQuery) -> int:
    """0 or less means the default (as in AIP-158); more than `MAX_PAGE_SIZE` is clamped."""
    if query.page_size <= 0:
        return DEFAULT_PAGE_SIZE
    return min(query.page_size, MAX_PAGE_SIZE)


def page(records: list[ActionRecord], size: int) -> Page:
    """A page from up to `size + 1` records in list order: the extra one only says "there is more"."""
    if len(records) <= size:
        return Page(records=records, next_token="")
    last = records[size - 1]
    return Page(records=records[:size], next_token=encode_cursor(last.created_at, last.action_id))


def encode_cursor(created_at: float, action_id: str) -> str:
    """A position in list order (not an offset): rows inserted behind it do not shift pages."""
    return base64.urlsafe_b64encode(f"{created_at!r}|{action_id}".encode()).decode()


def decode_cursor(token: str) -> tuple[float, str]:
    """Raises ValueError on a token this store did not make."""
    created, sep, action_id = base64.urlsafe_b64decode(token.encode()).decode().partition("|")
    if not sep:
        raise ValueError("not a page token")
    return float(created), action_id
