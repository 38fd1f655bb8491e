"""The table of the action state machine: every allowed (state, event, state) triple, `allows`,
the check `apply` and `create` make of each result, and the diagram docs/protocol.md shows.

The table is the whole truth of what may happen to an action; the steps (`steps`) say what each
event writes, and cannot leave it.
"""

from __future__ import annotations

from effectgate.gateway.core.transitions.events import Event
from effectgate.gateway.model import State


class IllegalTransition(Exception):
    """An event that the action's state does not allow: a bug in the caller, never data (callers
    check `allows` first). The RPC layer answers it FAILED_PRECONDITION (rpc/status.py)."""

    def __init__(self, state: State | None, event: str, message: str) -> None:
        super().__init__(message)
        # The state the event met (None: the action did not exist) and the event's name.
        self.state = state
        self.event = event


# The table: from-state, event, every state the event may lead to ("-": the action did not exist).
TABLE = """
-                  claim                  PLANNED DISPATCHED AWAITING_APPROVAL
AWAITING_APPROVAL  approve                PLANNED AWAITING_APPROVAL
AWAITING_APPROVAL  deny                   REJECTED
AWAITING_APPROVAL  expire                 REJECTED
PLANNED            reapprove              AWAITING_APPROVAL
NOT_FOUND          reapprove              AWAITING_APPROVAL
PLANNED            dispatch               DISPATCHED
NOT_FOUND          dispatch               DISPATCHED
DISPATCHED         dispatch               DISPATCHED
DISPATCHED         not_sent               DISPATCHED
DISPATCHED         receipt                CONFIRMED
DISPATCHED         refused                REJECTED
DISPATCHED         refused_before_acting  NOT_FOUND DISPATCHED
DISPATCHED         ambiguous              DISPATCHED
DISPATCHED         observed               CONFIRMED NOT_FOUND DISPATCHED UNKNOWN
UNKNOWN            observed               CONFIRMED NOT_FOUND DISPATCHED UNKNOWN
DISPATCHED         park                   UNKNOWN
DISPATCHED         reconcile              CONFIRMED REJECTED NOT_FOUND
UNKNOWN            reconcile              CONFIRMED REJECTED NOT_FOUND
CONFIRMED          grant_bypass           CONFIRMED
CONFIRMED          provider_note          CONFIRMED
REJECTED           grant_bypass           REJECTED
CONFIRMED          use_bypass             PLANNED
REJECTED           use_bypass             PLANNED
"""
# (from, event, to); `None` as from: the action did not exist.
EDGES: frozenset[tuple[State | None, str, State]] = frozenset(
    (None if src == "-" else State(src), name, State(dst))
    for src, name, *targets in (line.split() for line in TABLE.strip().splitlines())
    for dst in targets
)
_FROM: dict[str, frozenset[State]] = {}
for _src, _name, _ in EDGES:
    if _src is not None:
        _FROM[_name] = _FROM.get(_name, frozenset()) | {_src}
_NOWHERE: frozenset[State] = frozenset()


def allows(state: State, event: str) -> bool:
    """Whether the table lets an action in `state` take `event` (an event's `name`, e.g.
    `Reconcile.name`). `apply` may still refuse what the event carries (a resolution, a grant)."""
    return state in _FROM.get(event, _NOWHERE)


def check(src: State | None, event: Event, dst: State) -> None:
    if (src, event.name, dst) not in EDGES:
        raise IllegalTransition(src, event.name, f"{src} --{event.name}--> {dst.value} is not in the table")


# -- the diagram -----------------------------------------------------------------------------------

_ORDER = [
    None,
    State.AWAITING_APPROVAL,
    State.PLANNED,
    State.DISPATCHED,
    State.CONFIRMED,
    State.REJECTED,
    State.NOT_FOUND,
    State.UNKNOWN,
]


def mermaid() -> str:
    """The state diagram of docs/protocol.md, rendered from EDGES (self-loops included)."""
    lines = ["stateDiagram-v2"]
    for src, name, dst in sorted(EDGES, key=lambda e: (_ORDER.index(e[0]), e[1], _ORDER.index(e[2]))):
        left = "[*]" if src is None else src.value
        lines.append(f"    {left} --> {dst.value} : {name}")
    return "\n".join(lines)
