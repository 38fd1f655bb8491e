#!/usr/bin/env bash
# `make image`: builds the gateway's image from the Dockerfile and writes the CycloneDX SBOM of its
# environment beside it (IMAGE_DIR, default dist/image/: effectgate-VERSION.cdx.json).
#
# CONTAINER_ENGINE=podman (the default when podman is installed) runs Debian's podman as root with
# the settings this sandbox needs (runc, cgroupfs, host networking, ulimits it can grant) and, unless
# BASE_IMAGE is given, builds on the local stand-in for python:3.11-slim (scripts/image_base.sh).
# CONTAINER_ENGINE=docker runs `docker build` (BuildKit) on BASE_IMAGE (default python:3.11-slim).
# The host's pip configuration reaches the build as two build secrets (scripts/image_pip_config.py),
# mounted for the installing RUNs only: no layer holds it. Extra build options: IMAGE_BUILD_ARGS;
# IMAGE_SBOM=0 skips the SBOM.
set -euo pipefail
cd "$(dirname "$0")/.."

version="$(cat VERSION)"
image="${IMAGE:-effectgate:$version}"
out="${IMAGE_DIR:-dist/image}"
engine="${CONTAINER_ENGINE:-$(command -v podman >/dev/null 2>&1 && echo podman || echo docker)}"
python="${PYTHON:-python3}"

case "$engine" in
  podman)
    run=(podman --runtime runc --cgroup-manager cgroupfs)
    options=(--format docker --network host --ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
    if [ -z "${BASE_IMAGE:-}" ]; then
      bash scripts/image_base.sh
      BASE_IMAGE=localhost/effectgate-base:bookworm
    fi
    ;;
  docker)
    run=(docker)
    options=()
    BASE_IMAGE="${BASE_IMAGE:-python:3.11-slim}"
    export DOCKER_BUILDKIT=1
    ;;
  *) echo "CONTAINER_ENGINE must be podman or docker, not $engine" >&2; exit 2 ;;
esac

secrets="$(mktemp -d)"
trap 'rm -rf "$secrets"' EXIT
"$python" scripts/image_pip_config.py "$secrets"
read -r -a extra <<< "${IMAGE_BUILD_ARGS:-}"
build=("${run[@]}" build "${options[@]}" --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$version"
  --secret "id=pip.conf,src=$secrets/pip.conf" --secret "id=pip-cert,src=$secrets/pip-cert" "${extra[@]}")

"${build[@]}" --tag "$image" .
if [ "${IMAGE_SBOM:-1}" = 0 ]; then
  echo "image: $image (base $BASE_IMAGE)"
  exit 0
fi
mkdir -p "$out"
"${build[@]}" --target sbom-file --output "type=local,dest=$secrets/sbom" .
cp "$secrets/sbom/effectgate.cdx.json" "$out/effectgate-$version.cdx.json"
echo "image: $image (base $BASE_IMAGE); SBOM: $out/effectgate-$version.cdx.json"
