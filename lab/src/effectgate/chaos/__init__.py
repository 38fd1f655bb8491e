"""The chaos harness: the 2026 verified-tool-calls study, side by side with effectgate.

Scripted agents (re-planning with fresh tool-call ids, paraphrased arguments, a double approval,
two subagents owning one step) run one logical action per episode against a provider simulator
of their own, at the study's fault levels. Three methods see the same seeds: the agent calling the
provider directly, the study's verify-then-retry wrapper, and effectgate. Effects are counted only
from the simulators' ledgers. `effectgate chaos --help` runs it; docs/chaos.md explains the table.
"""
