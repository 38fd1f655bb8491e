#!/usr/bin/env bash
# `buf lint` (STANDARD, see buf.yaml) on proto/. buf comes from the npm registry
# (@bufbuild/buf ships the binary) into .venv/buf; without npm the check is skipped loudly,
# except in CI where it must run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=.venv/buf/node_modules/.bin/buf
if [ ! -x "$BUF" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then echo "buf lint: npm is required in CI" >&2; exit 1; fi
    echo "buf lint: SKIPPED (npm not found; apt-get install npm to enable it)" >&2
    exit 0
  fi
  npm install --silent --no-audit --no-fund --prefix .venv/buf @bufbuild/buf@1.75.0 >/dev/null
fi
"$BUF" lint
echo "buf lint: proto/ is clean"
