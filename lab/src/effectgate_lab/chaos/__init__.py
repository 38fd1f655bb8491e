"""The chaos harness: the 2026 verified-tool-calls study's setting, six methods side by side.

Scripted agents run one logical action per episode against a provider simulator of their own,
at the study's fault levels, with one fault stream per (task, level, seed) shared by every
method: the study's baseline, retries-only, idempotency-only and verified wrapper, a stable-key
baseline, and effectgate as a real gateway process. Effects are counted only from the
simulators' ledgers. `effectgate chaos --help` runs it; `effectgate chaos report RUN` renders a
recorded run; docs/chaos.md explains every table.
"""
