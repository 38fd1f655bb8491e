"""The action state machine, in one place and with no I/O.

Every change of an action is `apply(record, event, now, policy) -> record`: a pure function of
the stored record, what just happened (an event), the time and the tool's policy. `EDGES` lists
every allowed (state, event, state) triple; `apply` refuses anything else, so the table is the
whole truth (docs/protocol.md's diagram is rendered from it by `mermaid()` and a test keeps the
two equal). What the driver does next is decided, also purely, in `moves`.

Who writes what: the driver records its own events (dispatch, receipt, refusal, read-back, park);
the protocol creates actions and uses bypass grants; operators approve, reconcile and grant.
Lease bookkeeping (renewal and release) is not a state change and lives in `stamped`/`released`.

The rooms: `events` (what can happen to an action), `table` (the table, `allows`, the diagram),
`steps` (`apply` and what each event writes), `records` (what a write carries besides its step:
`create`, `stamped`, `released`, and `entry`, the event each transition leaves in the story),
`policy` (`Policy` and the consistency window), `moves` (what the driver does next). Callers
import this face: `from effectgate.gateway.core import transitions as t`.
"""

from __future__ import annotations

from effectgate.gateway.core.transitions.events import (
    Ambiguous,
    Answered,
    Approve,
    Claim,
    Deny,
    Dispatch,
    Event,
    Expire,
    GrantBypass,
    NotSent,
    Observed,
    Park,
    ProviderNote,
    Reapprove,
    Reconcile,
    Refused,
    RefusedBeforeActing,
    UseBypass,
)
from effectgate.gateway.core.transitions.policy import RETRY_PAUSE, Policy, absence_provable_at, provider_done_by
from effectgate.gateway.core.transitions.records import create, entry, released, stamped
from effectgate.gateway.core.transitions.steps import RESOLUTIONS, apply
from effectgate.gateway.core.transitions.table import EDGES, TABLE, IllegalTransition, allows, mermaid

__all__ = [
    "EDGES",
    "RESOLUTIONS",
    "RETRY_PAUSE",
    "TABLE",
    "Ambiguous",
    "Answered",
    "Approve",
    "Claim",
    "Deny",
    "Dispatch",
    "Event",
    "Expire",
    "GrantBypass",
    "IllegalTransition",
    "NotSent",
    "Observed",
    "Park",
    "Policy",
    "ProviderNote",
    "Reapprove",
    "Reconcile",
    "Refused",
    "RefusedBeforeActing",
    "UseBypass",
    "absence_provable_at",
    "allows",
    "apply",
    "create",
    "entry",
    "mermaid",
    "provider_done_by",
    "released",
    "stamped",
]
