"""`make sim-mutants`: deliberate one-line breaks of the protocol, each applied to a temporary
copy of the package, and the simulator run on it at the budget `make test` gives it. Each must be
caught (a violation, with its seed, trace and replay command); one that is not is a hole in the
simulator's workload, faults or invariants.

A mutant names a file under src/effectgate, one line's text and its replacement: when the
text is not found (the code moved), the mutant is reported as stale, not as caught."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.sim.run import SEEDS

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = "effectgate/gateway"
MCP = "effectgate/adapters/mcp"


@dataclass(frozen=True)
class Mutant:
    name: str
    # The promise it breaks (what the simulator must notice).
    breaks: str
    path: str
    old: str
    new: str
    # More (path, old, new) edits of the same break, when one line is not enough to reach it.
    also: tuple[tuple[str, str, str], ...] = ()


MUTANTS = (
    Mutant(
        "key-from-the-caller",
        "one effect per logical action: the key is the run context's, not the calling agent's",
        f"{GATEWAY}/model/domain.py",
        "        return keys.action_id(self.tenant, self.run_id, self.step_id, self.tool, self.scope)",
        "        return keys.action_id(self.tenant, self.run_id + self.agent, self.step_id, self.tool, self.scope)",
    ),
    Mutant(
        "absence-inside-window",
        "no false 'no effect': absence is proven only after the provider finished and the window closed",
        f"{GATEWAY}/core/transitions/steps.py",
        "        if read_at >= absence_provable_at(record, policy):",
        "        if True:",
    ),
    Mutant(
        "release-unproven",
        "limits count effects: a reservation is released only on proof of no effect",
        f"{GATEWAY}/model/limits.py",
        "UNCOUNTED: frozenset[State] = frozenset({State.REJECTED, State.NOT_FOUND})",
        "UNCOUNTED: frozenset[State] = frozenset({State.REJECTED, State.NOT_FOUND, State.UNKNOWN})",
    ),
    Mutant(
        "fence-dropped",
        "a holder that lost its lease writes nothing (the guarded update's fence)",
        f"{GATEWAY}/store/sql.py",
        '            " WHERE action_id = ? AND fence = ?"\n        )\n        self.update = d.render(update)',
        '            " WHERE action_id = ? AND (fence = ? OR 1)"\n        )\n        self.update = d.render(update)',
    ),
    Mutant(
        "approval-unbound",
        "an approval applies only to the payload it was shown",
        f"{GATEWAY}/core/operators/decisions.py",
        "            if fingerprint and fingerprint != record.fingerprint:",
        "            if False:",
    ),
    Mutant(
        "unknown-resent",
        "an UNKNOWN action is verified again, never re-sent on a guess",
        f"{GATEWAY}/model/domain.py",
        "UNSENT: frozenset[State] = frozenset({State.PLANNED, State.NOT_FOUND})",
        "UNSENT: frozenset[State] = frozenset({State.PLANNED, State.NOT_FOUND, State.UNKNOWN})",
        # The transition table would refuse that send (a second line of defence): it is opened
        # too, so that the break reaches the provider.
        also=(
            (
                f"{GATEWAY}/core/transitions/table.py",
                "NOT_FOUND          dispatch               DISPATCHED\n",
                "NOT_FOUND          dispatch               DISPATCHED\n"
                "UNKNOWN            dispatch               DISPATCHED\n",
            ),
        ),
    ),
    Mutant(
        "takeover-same-fence",
        "one lease holder writes at a time: taking a lease over fences the previous holder",
        f"{GATEWAY}/store/sql.py",
        '            "UPDATE actions SET fence = fence + 1, lease_owner = ?, lease_expires_at = ?"\n'
        "            \" WHERE action_id = ? AND (lease_owner = '' OR lease_expires_at <= ?)\"",
        '            "UPDATE actions SET fence = fence, lease_owner = ?, lease_expires_at = ?"\n'
        "            \" WHERE action_id = ? AND (lease_owner = '' OR lease_expires_at <= ?)\"",
    ),
    Mutant(
        "absent-is-confirmed",
        "answers match the provider: a read that finds nothing never confirms",
        f"{GATEWAY}/core/transitions/steps.py",
        "    if obs.outcome is Outcome.CONFIRMED:",
        "    if obs.outcome is not Outcome.UNKNOWN:",
    ),
    Mutant(
        "approval-skipped",
        "approvals before sends",
        f"{GATEWAY}/core/protocol/execute.py",
        "        needs_approval = tool.config.approval is Approval.REQUIRED or ruled",
        "        needs_approval = ruled",
    ),
    Mutant(
        "budget-unchecked",
        "limits never exceeded",
        f"{GATEWAY}/store/accounting.py",
        '            " WHERE limit_counters.effects < ? AND excluded.spent <= ? - limit_counters.spent"',
        '            " WHERE limit_counters.effects < ? + 99 AND excluded.spent <= ? + 9999 - limit_counters.spent"',
    ),
    Mutant(
        "expired-lease-kept",
        "nothing lost: a dead worker's action is taken over once its lease expires",
        f"{GATEWAY}/store/sql.py",
        "    f\"state IN ({_literals(DUE)}) AND (lease_owner = '' OR lease_expires_at <= ?)\"",
        "    f\"state IN ({_literals(DUE)}) AND (lease_owner = '' OR lease_expires_at <= ? - 1e9)\"",
    ),
    Mutant(
        "slow-first-probe-anchored",
        "one clock: a replica never runs on an anchor its probe cannot vouch for (the defect seed 122 found)",
        f"{GATEWAY}/store/clock.py",
        "        if rtt > MAX_PROBE_RTT:",
        "        if rtt > MAX_PROBE_RTT and self._anchor is not None:",
    ),
    Mutant(
        "bypass-kept",
        "a bypass grant lets one second effect through: using it spends it",
        f"{GATEWAY}/core/transitions/steps.py",
        "        bypass_granted=False,\n        receipt=None,",
        "        bypass_granted=True,\n        receipt=None,",
        # The grant's own step would refuse a second grant's use of a live generation: the table
        # lets a bypass be used from any state, so that the kept grant reaches the provider.
        also=(
            (
                f"{GATEWAY}/core/transitions/table.py",
                "REJECTED           use_bypass             PLANNED\n",
                "REJECTED           use_bypass             PLANNED\n"
                "DISPATCHED         use_bypass             PLANNED\n"
                "UNKNOWN            use_bypass             PLANNED\n",
            ),
        ),
    ),
    Mutant(
        "scope-per-run",
        "one effect per business object: a `unique = \"scope\"` tool's action id is the scope's",
        f"{GATEWAY}/core/limits/policy.py",
        "        if self.limits.unique is Unique.SCOPE:\n            return keys.scope_action_id(",
        "        if False:\n            return keys.scope_action_id(",
    ),
    Mutant(
        "forced-spend-uncounted",
        "the limits' counters equal the ledger: a grant's or a bypass's reservation counts its amount",
        f"{GATEWAY}/store/accounting.py",
        "    return (r.tenant, r.tool, bucket.currency, bucket.key, bucket.amount, effects_cap, spent_cap)",
        "    return (r.tenant, r.tool, bucket.currency, bucket.key, bucket.amount * (not forced),"
        " effects_cap, spent_cap)",
    ),
    Mutant(
        "wait-answers-any-change",
        "a wait answers when its condition holds, with the action as the provider left it",
        f"{GATEWAY}/core/operators/waits.py",
        "            if until(record):  # there before the feed could tell",
        "            if True:  # there before the feed could tell",
    ),
    Mutant(
        "webhook-unbound",
        "a webhook verified under adapter X's secret touches only actions X dispatched",
        f"{GATEWAY}/core/provider/reports.py",
        "        return dispatched_by == source and self._tenants.serves(source, record.tenant)",
        "        return True",
    ),
    Mutant(
        "tenant-unchecked",
        "another tenant's action is not found: an operator of tenant B never reads nor changes A's",
        f"{GATEWAY}/core/protocol/reads.py",
        "        if record.tenant != tenant:\n            raise ActionNotFound(action_id)\n        return record",
        "        if False:\n            raise ActionNotFound(action_id)\n        return record",
    ),
    Mutant(
        "key-without-tenant",
        "two tenants' actions are two actions, even with the same run context",
        f"{GATEWAY}/model/keys.py",
        "    material = _frame([tenant, run_id, step_id, tool, scope])",
        '    material = _frame(["", run_id, step_id, tool, scope])',
    ),
    Mutant(
        "approval-outlives-policy",
        "an approval given under a tool's old policy sends nothing under the new (a redeploy's config)",
        f"{GATEWAY}/core/protocol/driver.py",
        "        and record.policy_version != tool.policy_version",
        "        and False",
    ),
    Mutant(
        "notification-dropped-on-failure",
        "notifications are delivered at least once: a sink's failure is retried, never taken as delivered",
        f"{GATEWAY}/background/notify/deliverer.py",
        "            except DeliveryFailed as exc:\n                await self._failed(sink, row, str(exc))",
        "            except DeliveryFailed as exc:\n"
        "                await self.store.notify_done(row.sink, row.event_id)",
    ),
    Mutant(
        "outage-undocumented",
        "only documented answers: a store outage is UNAVAILABLE, not an internal error",
        f"{GATEWAY}/core/protocol/collaborators.py",
        "            raise GatewayUnavailable(str(exc)) from exc",
        "            raise RuntimeError(str(exc)) from exc",
    ),
    Mutant(
        "mcp-any-404-forgotten",
        "an MCP call is sent again only when the server did not know its session, not on any 404",
        f"{MCP}/connection.py",
        "                    if exc.code in SESSION_GONE_CODES:",
        "                    if True:",
    ),
    Mutant(
        "mcp-later-404-blamed-on-call",
        "a 404 answered to the tools/list the SDK sends after a call's answer is not the call's own",
        f"{MCP}/connection.py",
        "            if sent is not None and sent.status == 0:\n"
        "                sent.status = response.status_code\n"
        "            elif sent is not None:\n"
        "                sent.later += 1",
        "            if sent is not None:\n                sent.status = response.status_code",
    ),
)


def apply(mutant: Mutant, into: Path) -> bool:
    """Copies the package into `into` with the mutant's line replaced; False when it is stale."""
    shutil.copytree(ROOT / "src" / "effectgate", into / "effectgate")
    for path, old, new in ((mutant.path, mutant.old, mutant.new), *mutant.also):
        target = into / path
        text = target.read_text()
        if text.count(old) != 1:
            return False
        target.write_text(text.replace(old, new))
    return True


def hunt(mutant: Mutant, seeds: int) -> tuple[str, str]:
    """("caught" | "missed" | "stale", the simulator's output)."""
    with tempfile.TemporaryDirectory(prefix="effectgate-mutant-") as folder:
        if not apply(mutant, Path(folder)):
            return "stale", f"the line to break is not in {mutant.path} (the code moved: update the mutant)"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, str(ROOT)]), "EFFECTGATE_SIM_MUTANT": mutant.name}
        run = subprocess.run(
            [sys.executable, "-m", "tests.sim.run", "--seeds", str(seeds), "--seed", "1", "--stop", "--mutant-check"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        output = run.stdout + run.stderr
        if "mutated effectgate not loaded" in output:
            return "stale", output
        caught = run.returncode == 1 and "violated:" in output
        return ("caught" if caught else "missed"), output


def main() -> int:
    seeds = int(os.environ.get("SEEDS", SEEDS))
    missed = 0
    for mutant in MUTANTS:
        verdict, output = hunt(mutant, seeds)
        lines = output.strip().splitlines()
        print(f"== {mutant.name}: {verdict} ({mutant.breaks})")
        if verdict == "caught":
            violated = [line for line in lines if "violated:" in line]
            replay = [line for line in lines if "replay:" in line]
            failing = [line for line in lines if line.startswith("seed ")]
            print("\n".join(f"   {line.strip()}" for line in failing[:1] + violated[:3] + replay[:1]))
            shrunk = [i for i, line in enumerate(lines) if line.startswith("shrunk: ")]
            if shrunk:  # the failing seed's shrunk trace (tests/sim/shrink.py) and its replay
                print(
                    "\n".join(
                        f"   {line}" for line in lines[shrunk[0] :] if not line.startswith(("faults:", "cpu:", "sim:"))
                    )
                )
            else:
                trace = [line for line in lines if line.startswith("  ") and "violated:" not in line]
                print("   trace (last 15 events):")
                print("\n".join(f"   {line}" for line in trace[-16:-1]))
        else:
            missed += 1
            print("\n".join(f"   {line}" for line in lines[-4:]))
    print(f"sim-mutants: {len(MUTANTS) - missed} of {len(MUTANTS)} caught within {seeds} seeds each")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
