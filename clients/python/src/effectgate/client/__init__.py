"""effectgate client: typed stubs (effectgate.v1, effectgate.tools.v1) and a run-context helper."""

from effectgate.client.client import EffectGateClient
from effectgate.client.context import RunContext, current, run, stable_step_id, step, subagent

__all__ = ["EffectGateClient", "RunContext", "current", "run", "stable_step_id", "step", "subagent"]
