"""The part of the protocol that does I/O. One face, `EffectProtocol` (`verbs`), built by
composition; its file says where each verb lives:

- `execute`: `execute` (read first, claim, single flight, the repeat rules), `drive_leased`, `drain`;
- `reads`: `verify`, `read_object`, `peek`, `get`, `list`, `events`, `history`, `settled_at`,
  `changes`, `awaiting`;
- `leases`: `try_lease`, `lease`, `commit`, `preview`, `release`, `claim_due`, `wake_reconciler`,
  `wait_for_work`;
- `collaborators`: `refuse_if_skewed`, `now`, `tool`, `tool_config`, `tool_deadline`,
  `approvals_required`, `answer_replays_with`.

`collaborators` is the one place that holds what every part uses (store, tools, settings, clock,
limits, the replay cache, the observer, the drives and claims in flight); the driver (`driver`: write, call,
write) moves one leased action; the replay cache (`replay_cache`) keeps settled actions and their
answers. The pure rules they apply are in `core/transitions/`.
"""

from __future__ import annotations

from effectgate.gateway.core.protocol.collaborators import Collaborators, DriverSettings, policy_of
from effectgate.gateway.core.protocol.execute import ExecuteCommand, ExecuteResult, validate_context
from effectgate.gateway.core.protocol.replay_cache import ReplayCache, TtlCache
from effectgate.gateway.core.protocol.verbs import EffectProtocol

__all__ = [
    "Collaborators",
    "DriverSettings",
    "EffectProtocol",
    "ExecuteCommand",
    "ExecuteResult",
    "ReplayCache",
    "TtlCache",
    "policy_of",
    "validate_context",
]
