"""The effect protocol's one face, `EffectProtocol`: the verbs the RPC layer, operators, the
reconciler and the server call, and where each one lives.

It is built by composition, from one `Collaborators` (`collaborators`: store, tools, lease
settings, clock, limits, replay cache, observer, the drives and claims in flight; the one place
that lists them) handed to the driver (`driver`: write, call, write), the lease verbs (`leases`),
the read verbs (`reads`) and the Execute path (`execute`): `EffectProtocol(Collaborators(store,
tools, settings, clock=...))`. Each verb below is the bound method of the part that holds it, so
a call goes straight there, with no forwarding frame on the hot path.
"""

from __future__ import annotations

from effectgate.gateway.core.protocol.collaborators import Collaborators
from effectgate.gateway.core.protocol.driver import Driver
from effectgate.gateway.core.protocol.execute import ExecutePath
from effectgate.gateway.core.protocol.leases import Leases
from effectgate.gateway.core.protocol.reads import Reads


class EffectProtocol:
    def __init__(self, parts: Collaborators) -> None:
        self.parts = parts
        # What the core reports to (the operators' verbs and the waits report through it too).
        self.observer = parts.observer
        driver = Driver(parts)
        leases = Leases(parts, driver)
        reads = Reads(parts, driver, leases)
        path = ExecutePath(parts, driver, leases)

        # `execute`: the Execute path and the drives this process runs.
        self.execute = path.execute
        self.replay = path.replay
        self.drive_leased = path.drive_leased
        self.drain = path.drain
        # `reads`: reads for the RPC layer and operators, and the read-backs.
        self.verify = reads.verify
        self.read_object = reads.read_object
        self.peek = reads.peek
        self.get = reads.get
        self.list = reads.list
        self.events = reads.events
        self.history = reads.history
        self.settled_at = reads.settled_at
        self.changes = reads.changes
        self.awaiting = reads.awaiting
        # `leases`: operators' and the reconciler's leases.
        self.try_lease = leases.try_lease
        self.lease = leases.lease
        self.commit = leases.commit
        self.preview = leases.preview
        self.release = leases.release
        self.claim_due = leases.claim_due
        self.wake_reconciler = leases.wake_reconciler
        self.wait_for_work = leases.wait_for_work
        # `collaborators`: the skew check, the clock, the tools' settings and where replays'
        # answers go.
        self.refuse_if_skewed = parts.refuse_if_skewed
        self.now = parts.now
        self.tool = parts.tool
        self.tool_config = parts.tool_config
        self.tool_deadline = parts.tool_deadline
        self.approvals_required = parts.approvals_required
        self.answer_replays_with = parts.answer_replays_with
        self.unanswered = parts.cache.unanswered
        self.keep_answer = parts.cache.keep_answer
