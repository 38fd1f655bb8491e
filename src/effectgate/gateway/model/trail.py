"""The audit trail's shapes (issue 34): an event as the trail shows it (with its tenant, tool and
its link in the tenant's hash chain), a query over the trail, a page of it, and what the chain's
verification finds."""

from __future__ import annotations

from dataclasses import dataclass, field

from effectgate.gateway.model.domain import ActionEvent


@dataclass(frozen=True)
class TrailEvent:
    """An `ActionEvent` as stored in the trail: whose it is and where it sits in the chain
    (`n` 0 and empty hashes for an event written before the chain began)."""

    event: ActionEvent
    tenant: str
    tool: str
    n: int = 0
    prev_hash: str = ""
    hash: str = ""
    # The detail's stored text: what the hash covers (`event.detail` is it decoded).
    detail_json: str = "{}"


@dataclass(frozen=True)
class EventQuery:
    """One tenant's events in chain order after the cursor `after`, filtered: `since` <= at <
    `until` (0 = unbounded), and each non-empty text filter equal."""

    tenant: str
    since: float = 0.0
    until: float = 0.0
    principal: str = ""
    kind: str = ""
    tool: str = ""
    page_size: int = 100
    after: str = ""


@dataclass(frozen=True)
class EventPage:
    events: list[TrailEvent] = field(default_factory=list)
    # The cursor after the last event of this page ("" when the page is empty: keep the old one).
    next_token: str = ""


@dataclass(frozen=True)
class ChainEnds:
    """A tenant's chain as the store keeps its ends: the head (last position and hash) and the
    anchor retention left (the last pruned position and hash; 0 and "" when nothing was pruned)."""

    tenant: str
    head_n: int
    head_hash: str
    anchor_n: int = 0
    anchor_hash: str = ""


@dataclass(frozen=True)
class ChainBreak:
    """The first row where a tenant's chain does not hold: its id (`seq`) and position, what was
    wrong, and the value expected against the value found."""

    tenant: str
    seq: int
    n: int
    problem: str
    expected: str
    found: str
