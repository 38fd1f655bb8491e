"""The drift audit: the provider's own records against the gateway's (docs/webhooks.md).

For every adapter that can list what its provider holds (`ListsEffects`), the objects made since
a time are compared with the actions that adapter dispatched (the adapter recorded on each action;
for an action stored before that was recorded, its tool's adapter), so moving a tool to another
adapter files the actions sent before the move under the adapter that sent them:

- `untracked`: a provider effect with no gateway action (made around the gateway: a raw API
  key, a dashboard, code that skipped it);
- `missing`: a CONFIRMED action whose provider object is not there (removed, or never made);
- `mismatch`: an effect whose amount or currency (the fields the adapter derives from the
  payload, `expected_effect`) differs from its action's payload.

`effectgate audit` runs one pass; `[audit] interval` runs it as a background job with a gauge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from effectgate.adapters.capabilities import ListsEffects, ProviderEffect
from effectgate.gateway.background.runner import Job
from effectgate.gateway.core import BoundTool
from effectgate.gateway.model import ActionRecord, ListQuery, State
from effectgate.gateway.observability import provider_metrics
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.audit")
KINDS = ("untracked", "missing", "mismatch")
# Actions created this long before `since` still match effects made after it (retries, clocks).
MATCH_SLACK = 3600.0


@dataclass(frozen=True)
class Finding:
    kind: str
    adapter: str
    object_id: str = ""
    action_id: str = ""
    tool: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class DriftReport:
    since: float
    now: float
    # `--since` as the operator wrote it ("24h"); "" when the audit runs on its own.
    since_text: str = ""
    adapters: list[str] = field(default_factory=list)
    effects: int = 0
    actions: int = 0
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {kind: sum(f.kind == kind for f in self.findings) for kind in KINDS}

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "counts": self.counts()}

    def summary(self) -> str:
        counts = self.counts()
        window = self.since_text or f"{self.now - self.since:.0f}s"
        head = (
            f"drift audit of {', '.join(self.adapters) or 'no adapter that lists effects'}: {self.effects} provider "
            f"effect(s), {self.actions} gateway action(s) in the last {window}: "
            + ", ".join(f"{counts[k]} {k}" for k in KINDS)
        )
        lines = [head]
        for f in self.findings:
            what = {
                "untracked": "provider effect with no gateway action",
                "missing": "CONFIRMED action with no provider object",
                "mismatch": "effect differs from its action's payload",
            }[f.kind]
            extra = f" {f.detail}" if f.detail else ""
            lines.append(
                f"  {f.kind:9} {f.adapter}: {what}: object {f.object_id or '-'} action {f.action_id or '-'}{extra}"
            )
        return "\n".join(lines)


async def _actions(store: Store, tenants: Iterable[str], tool: str, since: float) -> list[ActionRecord]:
    found: list[ActionRecord] = []
    for tenant in tenants:
        after = ""
        while True:
            page = await store.list(ListQuery(tenant=tenant, tool=tool, page_size=1000, after=after))
            found += [r for r in page.records if r.created_at >= since - MATCH_SLACK]
            if not page.next_token:
                break
            after = page.next_token
    return found


def _compare(
    adapter: str,
    lister: ListsEffects,
    effects: list[ProviderEffect],
    records: list[tuple[ActionRecord, BoundTool]],
    since: float,
) -> list[Finding]:
    findings: list[Finding] = []
    by_action = {r.action_id: (r, t) for r, t in records}
    seen: set[str] = set()
    for effect in effects:
        matched = by_action.get(effect.action_id) if effect.action_id else None
        if matched is None:
            findings.append(
                Finding("untracked", adapter, effect.object_id, effect.action_id, detail=dict(effect.fields))
            )
            continue
        record, tool = matched
        seen.add(record.action_id)
        expected = lister.expected_effect(tool.load(record.payload))
        differs = {
            k: {"provider": effect.fields.get(k), "gateway": v}
            for k, v in expected.items()
            if effect.fields.get(k) != v
        }
        if differs:
            findings.append(Finding("mismatch", adapter, effect.object_id, record.action_id, record.tool, differs))
    for record, _ in records:
        if record.state is State.CONFIRMED and record.created_at >= since and record.action_id not in seen:
            object_id = record.receipt.external_id if record.receipt else ""
            findings.append(Finding("missing", adapter, object_id, record.action_id, record.tool))
    return findings


async def audit(
    store: Store,
    tools: Mapping[str, BoundTool],
    adapters: Mapping[str, object],
    tenants: Iterable[str],
    since: float,
    now: float,
) -> DriftReport:
    """One pass over every adapter that lists effects (`adapters` by name; `tools` by name)."""
    report = DriftReport(since=since, now=now)
    tenants = sorted(set(tenants))
    listers = {name: a for name, a in sorted(adapters.items()) if isinstance(a, ListsEffects)}
    by_adapter: dict[str, list[tuple[ActionRecord, BoundTool]]] = {name: [] for name in listers}
    for tool_name, tool in sorted(tools.items()):
        for record in await _actions(store, tenants, tool_name, since):
            sender = record.adapter or tool.config.adapter  # who dispatched it, not who would now
            if sender in by_adapter:
                by_adapter[sender].append((record, tool))
    for name, adapter in listers.items():
        report.adapters.append(name)
        effects = await adapter.list_effects(since)
        records = by_adapter[name]
        report.effects += len(effects)
        report.actions += sum(r.created_at >= since for r, _ in records)
        report.findings += _compare(name, adapter, effects, records, since)
    return report


def drift_job(
    store: Store,
    tools: Mapping[str, BoundTool],
    adapters: Mapping[str, object],
    tenants: Iterable[str],
    *,
    interval: float,
    lookback: float,
    clock: Callable[[], float],
) -> Job:
    """The audit every `interval` seconds, looking back `lookback`; findings are a warning and a gauge."""
    tenant_list = sorted(set(tenants))

    async def run() -> None:
        now = clock()
        report = await audit(store, tools, adapters, tenant_list, now - lookback, now)
        provider_metrics.drift_found(report.counts())
        if report.findings:
            log.warning("%s", report.summary())

    return Job("drift", run, interval, at_start=False)
