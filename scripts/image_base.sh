#!/usr/bin/env bash
# A local stand-in for python:3.11-slim, for machines that cannot pull from a container registry
# (this project's CI among them): Debian bookworm's minimal root file system (debootstrap
# --variant=minbase) with Debian's Python 3.11, pip and venv, imported into podman as
# localhost/effectgate-base:bookworm. pip's EXTERNALLY-MANAGED marker is removed, as in the
# official image (whose Python is not Debian's). Made once: the root file system is cached as a
# tarball outside the repository (EFFECTGATE_CACHE, default /var/cache/effectgate) and imported
# again only when podman no longer has the image. Needs root (debootstrap, rootful podman).
set -euo pipefail

cache="${EFFECTGATE_CACHE:-/var/cache/effectgate}"
image="${EFFECTGATE_BASE_IMAGE:-localhost/effectgate-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tarball="$cache/effectgate-base-bookworm.tar"
podman=(podman --runtime runc --cgroup-manager cgroupfs)

if "${podman[@]}" image exists "$image"; then
  exit 0
fi
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  root="$(mktemp -d "$cache/rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  echo "image base: debootstrap bookworm into $root (once; cached as $tarball)"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" "$mirror" > "$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  rm -f "$root"/usr/lib/python3.*/EXTERNALLY-MANAGED
  # What an image needs none of: apt's package lists and caches, documentation, logs.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
    "$root"/var/log/*
  tar --numeric-owner -C "$root" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
fi
"${podman[@]}" import --change 'CMD ["python3"]' "$tarball" "$image" > /dev/null
echo "image base: $image imported from $tarball"
