# Everyday commands. Each target sets up what it needs (.venv, installs, generated code).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
UV := $(VENV)/bin/uv
# The environments install with uv (pinned in constraints.txt, put in by the venv's own pip): it
# resolves, fetches and unpacks the same pinned packages in a few seconds where pip took about half
# a minute (a clean clone on this project's 2-core machine: 31 s for .venv with pip, 6 s with uv,
# the same 165 packages at the same versions). .venv's install also writes the bytecode of every
# installed module, on every core (--compile-bytecode): the suite starts hundreds of Python
# processes (gateways, CLIs, pytest's workers) that would otherwise each compile what they import.
# In .venv the build back-end (setuptools) goes in first, and the four editable projects build
# without isolation (no throw-away build environment each). The CrewAI environment keeps build
# isolation and writes no bytecode up front (one test file imports from it).
CREWAI_VENV := .venv-crewai
CREWAI_STAMP := $(CREWAI_VENV)/.installed
# `make test` runs the tests in two pytest-xdist workers a core: most tests wait on the processes
# they start (at one a core, a run kept two cores ~60% busy). A clean clone alone on 2 cores:
# 512 s with 3 workers, 442 s with 4, 417 s with 6; 4 keeps a second suite beside it in bounds.
# TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
# Extra pytest arguments for `make test`, e.g. PYTEST_ARGS=--junitxml=run.xml (scripts/slow_tests.py reads it).
PYTEST_ARGS ?=

.PHONY: demo run image test test-services test-ts ts-checks lint proto proto-check bench bench-notify bench-peers chaos soak fuzz sim sim-bench sim-campaign sim-mutants venv venv-crewai test-bytecode clean

# .venv with uv in it (the one tool both environments install with), put there by the system's pip.
$(UV): constraints.txt
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(PY) install --quiet --no-compile --disable-pip-version-check -c constraints.txt uv
	touch $@

$(STAMP): $(UV) pyproject.toml clients/protos/pyproject.toml clients/python/pyproject.toml lab/pyproject.toml constraints.txt constraints-build.txt
	$(UV) pip install --quiet --python $(PY) -c constraints.txt -c constraints-build.txt --upgrade pip setuptools
	$(UV) pip install --quiet --python $(PY) --compile-bytecode --no-build-isolation -c constraints.txt -e clients/protos -e 'clients/python[langgraph,openai-agents,pydantic-ai,otel]' -e '.[dev]' -e 'lab[peers]'
	touch $(STAMP)

venv: $(STAMP)

$(CREWAI_STAMP): $(UV) clients/protos/pyproject.toml clients/python/pyproject.toml constraints-crewai.txt
	$(PYTHON) -m venv --without-pip $(CREWAI_VENV)
	$(UV) pip install --quiet --python $(CREWAI_VENV)/bin/python -c constraints-crewai.txt --upgrade pip
	$(UV) pip install --quiet --python $(CREWAI_VENV)/bin/python -c constraints-crewai.txt -e clients/protos -e 'clients/python[crewai]'
	touch $(CREWAI_STAMP)

venv-crewai: $(CREWAI_STAMP)

# The bytecode of the project's own modules and the tests' helpers, on every core (the installed
# packages' is written by .venv's install). The test modules themselves are left to pytest's
# workers, which rewrite them for their assertions as they collect: a collection run first to write
# them once (what this step was) kept a core idle for 15 s before the workers started theirs.
test-bytecode: $(STAMP)
	@$(PY) -m compileall -q -j0 src lab/src clients/python/src clients/protos scripts tests > /dev/null

## demo: gateway on SQLite + provider simulators + a demo agent that re-plans under faults
demo: $(STAMP)
	$(PY) -m effectgate_lab.demo

## run: a gateway on SQLite + the provider simulators, until Ctrl-C (try the client example against it)
run: $(STAMP)
	$(PY) -m effectgate_lab.dev

## image: the gateway's image (podman, or CONTAINER_ENGINE=docker) and its CycloneDX SBOM in dist/image/
# On podman it builds on a local stand-in for python:3.11-slim made once from Debian's packages
# (scripts/image_base.sh, cached in /var/cache/effectgate); BASE_IMAGE=python:3.11-slim@sha256:…
# builds on the real one. docs/deploy.md has the commands it runs.
image:
	bash scripts/build_image.sh

## test: the whole suite (lint, type check, generated-code check, tests)
# Each step is mostly one busy core (pip, mypy, npm, node), so they run side by side: the two
# environments (.venv, .venv-crewai) are made together while the TypeScript client is built (npm
# ci, tsc: the README's TypeScript snippets run against it; .ts-build.log), and once .venv is there
# the project's own bytecode is written (test-bytecode); then pytest starts, while lint and the
# generated-code check then the TypeScript tests (on the built client) run on beside it. Their
# output is one block each when they end (.checks.log, .ts-checks.log meanwhile). Any failing
# step fails the target. The CrewAI install and the TypeScript build are not run at a lower
# priority beside .venv: under other load they then starve, and pytest waits for them too (a
# clean clone's pytest started 110 s later beside a second make test).
# The suite starts hundreds of Python processes (gateways, CLIs, pytest's workers): each reads its
# modules from bytecode written once, even where the environment says PYTHONDONTWRITEBYTECODE (it
# then compiles every module in every process: collection alone takes twice the CPU).
test: export PYTHONDONTWRITEBYTECODE =
test: test-services
	@bash scripts/test_typescript.sh build > .ts-build.log 2>&1 & tsbuild=$$!; \
	$(MAKE) --no-print-directory -j2 --output-sync=target test-bytecode $(CREWAI_STAMP); venvs=$$?; \
	wait $$tsbuild; built=$$?; cat .ts-build.log; [ $$venvs -eq 0 ] || exit $$venvs; \
	( $(MAKE) --no-print-directory lint > .checks.log 2>&1; rc=$$?; cat .checks.log; \
	   if [ $$rc -eq 0 ]; then echo "lint: passed"; else echo "lint: FAILED (exit $$rc, output above)"; fi; \
	   exit $$rc ) & lint=$$!; \
	( { $(MAKE) --no-print-directory proto-check && bash scripts/test_typescript.sh run; } > .ts-checks.log 2>&1; \
	   rc=$$?; cat .ts-checks.log; \
	   if [ $$rc -eq 0 ]; then echo "ts-checks: passed"; else echo "ts-checks: FAILED (exit $$rc, output above)"; fi; \
	   exit $$rc ) & ts=$$!; \
	[ $$built -eq 0 ] && $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS); tests=$$?; \
	wait $$lint; lint=$$?; wait $$ts; ts=$$?; \
	[ $$built -eq 0 ] && [ $$tests -eq 0 ] && [ $$lint -eq 0 ] && [ $$ts -eq 0 ]

# The generated-code check, then the TypeScript tests (both use clients/typescript/node_modules).
ts-checks: $(STAMP)
	$(MAKE) --no-print-directory proto-check
	$(MAKE) --no-print-directory test-ts

# Debian's PostgreSQL and Dovecot, installed when missing (as root); the tests start their own.
test-services:
	bash scripts/install_test_services.sh

## test-ts: the TypeScript client (npm ci, tsc, node --test against a real gateway)
test-ts: $(STAMP)
	bash scripts/test_typescript.sh

lint: $(STAMP)
	bash scripts/buf_lint.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/hadolint Dockerfile

proto: $(STAMP)
	$(PY) scripts/gen_protos.py

proto-check: $(STAMP)
	$(PY) scripts/gen_protos.py --check

bench: $(STAMP)
	$(PY) -m effectgate_lab.bench --json bench-results.json

## bench-peers: one effect through Restate, DBOS (SQLite, PostgreSQL) and effectgate against the direct call, side by side (docs/benchmarks.md)
bench-peers: $(STAMP)
	$(PY) -m effectgate_lab.bench.peers --json bench-peers.json

## bench-notify: a down [[notify]] sink with a failing backlog against no sink, side by side (docs/benchmarks.md)
bench-notify: $(STAMP)
	$(PY) -m effectgate_lab.bench.notify_down --json bench-notify.json

## chaos: the committed run's settings (docs/chaos-run.json: every fault family of the engines' table at >= 200 episodes per method), recorded in chaos-results.json
chaos: $(STAMP)
	$(VENV)/bin/effectgate chaos --seeds 70 --family-episodes 200 --json chaos-results.json

# Writes that land after the cut (docs/protocol.md): 100 actions a study, figures in soak-slow-cut.jsonl.
soak: $(STAMP)
	rm -f soak-slow-cut.jsonl
	SLOW_CUT_ACTIONS=100 SLOW_CUT_RESULTS=soak-slow-cut.jsonl $(VENV)/bin/python -m pytest -q tests/test_slow_cut.py -k around_the_cut
	cat soak-slow-cut.jsonl

## fuzz: the stateful model of the protocol for FUZZ_MINUTES (30), a seed per round, found examples in .hypothesis/
FUZZ_MINUTES ?= 30
## sim: the deterministic simulator (tests/sim): SEEDS seeds from SEED (SEEDS=1 SEED=S replays one)
# The default budget is the one `make test` gives it (tests/sim/test_sim.py); the last line is
# `sim: N seeds, E events, V violations, digest HEX`.
SEEDS ?=
SEED ?= 1
sim: $(STAMP)
	$(PY) -m tests.sim.run $(if $(SEEDS),--seeds $(SEEDS)) --seed $(SEED)

## sim-campaign: the long run (SEEDS, default a million, from SEED) in JOBS processes; run it again to go on
# Resumable: each chunk of 1,000 seeds that ends is a line of LEDGER, pinned to the commit.
# CHECK=K runs K of LEDGER's chunks again on this tree and compares their digests (any commit's
# ledger, e.g. LEDGER=docs/sim-campaign.jsonl, the long run's own).
JOBS ?= 2
LEDGER ?= sim-campaign.jsonl
CHECK ?=
sim-campaign: $(STAMP)
	$(PY) -m tests.sim.campaign --seeds $(or $(SEEDS),1000000) --seed $(SEED) --jobs $(JOBS) --ledger $(LEDGER) $(if $(CHECK),--check $(CHECK))

## sim-bench: the simulator's speed in CPU seconds, the budget's worlds beside the target's smallest
# world (two replicas, two agents of two steps), alternating over the same seeds
sim-bench: $(STAMP)
	$(PY) -m tests.sim.bench

## sim-mutants: one-line breaks of the protocol, each must be caught by `make sim`'s budget
sim-mutants: $(STAMP)
	$(PY) -m tests.sim.mutants

fuzz: $(STAMP) test-services
	bash scripts/fuzz_model.sh $(FUZZ_MINUTES)

clean:
	rm -rf $(VENV) $(CREWAI_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .checks.log .ts-checks.log .ts-build.log
