#!/usr/bin/env bash
# Installs from Debian's packages, when missing, the servers the test suite starts by itself
# (PostgreSQL, Dovecot IMAP), Chromium for the console's browser tests (driven by Playwright through
# its executable path: Playwright's own browser downloads are never used), libfaketime (a replica with a skewed clock), openssl for the TLS tests' certificates, and Node.js with npm for the
# TypeScript client (its tests, its code generator and buf lint), and podman with runc and
# debootstrap for the image's tests (tests/test_image.py builds the Dockerfile on a stand-in base
# made from Debian's packages and runs it, rootful). The tests start their own
# throw-away instances on loopback; nothing here starts a service. Needs root (CI runs as root); elsewhere it only says what to do.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v dovecot >/dev/null 2>&1 || missing+=(dovecot-imapd)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
# libfaketime: the clock-skew tests run one replica under LD_PRELOAD of it.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(faketime)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "test services missing: ${missing[*]} (run: sudo apt-get install -y ${missing[*]})" >&2
  exit 0
fi
echo "installing test services: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the packages from starting system-wide daemons: tests start their own.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
