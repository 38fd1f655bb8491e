#!/usr/bin/env bash
# Sourced by the scripts that run Node: puts a Node >= 22 first on PATH. The TypeScript client
# needs Node 22 (engines in clients/typescript/package.json): Node 20, Debian's, reached its end
# of life in April 2026, and its tools (@bufbuild/protoc-gen-es 2.17, the `ai` package 7, tsx)
# want 22. When the node on PATH is older, the npm registry's `node` package (it ships the
# binary) is installed once into .venv/node, like buf into .venv/buf.
NODE_REQUIRED_MAJOR=22
NODE_PACKAGE="node@22.23.3"
_eg_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_eg_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
if [ "$_eg_major" -lt "$NODE_REQUIRED_MAJOR" ]; then
  if [ ! -x "$_eg_root/.venv/node/node_modules/.bin/node" ]; then
    npm install --silent --no-audit --no-fund --prefix "$_eg_root/.venv/node" "$NODE_PACKAGE" >/dev/null
  fi
  export PATH="$_eg_root/.venv/node/node_modules/.bin:$PATH"
fi
unset _eg_root _eg_major
