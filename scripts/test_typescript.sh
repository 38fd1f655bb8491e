#!/usr/bin/env bash
# The TypeScript client's tests: `npm ci` (versions from the committed package-lock.json), tsc,
# then node's built-in test runner (Node >= 22: scripts/node_toolchain.sh) against a real
# `effectgate serve` that the tests start with
# this project's Python. Without node/npm the tests are skipped loudly, except in CI.
# `build` stops after tsc (what tests/test_readme_snippets.py needs); `run` only runs the built
# tests (`make test` runs them beside pytest, which must not see tsc rewrite dist/ under it).
set -euo pipefail
step="${1:-all}"
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then echo "TypeScript tests: node and npm are required in CI" >&2; exit 1; fi
  echo "TypeScript tests: SKIPPED (node/npm not found; scripts/install_test_services.sh installs them)" >&2
  exit 0
fi
# shellcheck source=scripts/node_toolchain.sh
source scripts/node_toolchain.sh
cd clients/typescript
# `npm ci` once per lockfile: proto-check (scripts/gen_protos.py) may have just run it, and a second
# one deletes and reinstalls the same node_modules.
if ! cmp -s package-lock.json node_modules/.ci-package-lock.json; then
  npm ci --no-audit --no-fund --silent
  cp package-lock.json node_modules/.ci-package-lock.json
fi
export EFFECTGATE_PYTHON="${EFFECTGATE_PYTHON:-$PWD/../../.venv/bin/python}"
case "$step" in
  all) npm test --silent ;;
  build) npm run build --silent ;;
  run) node --test --test-concurrency=1 dist/test/*.test.js ;;
  *) echo "usage: $0 [all|build|run]" >&2; exit 2 ;;
esac
