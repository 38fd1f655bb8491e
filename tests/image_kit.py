"""The gateway's image as an operator handles it, for tests/test_image.py: `make image`'s build
(scripts/build_image.sh), podman with this machine's settings, containers run from the image and
removed after, an image's installed environment read from the host (`pip freeze --path`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = (ROOT / "VERSION").read_text().strip()
IMAGE = f"effectgate:{VERSION}"
# Rootful podman as this sandbox allows it: runc (crun's cgroup set-up is refused), cgroupfs, and
# only the file and process limits it can grant (docs/deploy.md).
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")


def missing_tools() -> list[str]:
    return [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}: {done.stderr[-3000:]}")
    return done


async def apodman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`podman` off the event loop, so the simulators the test serves on it keep answering."""
    return await asyncio.to_thread(podman, *args, timeout=timeout, check=check)


def build(image: str, sbom_dir: Path, *extra: str, sbom: bool = True) -> None:
    """`make image` (scripts/build_image.sh): the image tagged `image`, its SBOM in `sbom_dir`."""
    env = {
        **os.environ,
        "IMAGE": image,
        "IMAGE_DIR": str(sbom_dir),
        "IMAGE_SBOM": "1" if sbom else "0",
        "IMAGE_BUILD_ARGS": " ".join(extra),
        "CONTAINER_ENGINE": "podman",
        "PYTHON": sys.executable,
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_image.sh")], capture_output=True, text=True, env=env, timeout=1500
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]


def frozen(image: str, *venvs: str) -> list[str]:
    """`pip freeze` of the environments at `venvs` inside `image`, read from the host through the
    image's mounted root file system (the image itself has no pip)."""
    root = Path(podman("image", "mount", image).stdout.strip())
    try:
        paths = [str(p) for venv in venvs for p in sorted((root / venv.lstrip("/")).glob("lib/python3*/site-packages"))]
        assert paths, f"no site-packages under {venvs} in {image}"
        freeze = [sys.executable, "-m", "pip", "freeze", "--all", *(a for p in paths for a in ("--path", p))]
        return subprocess.run(freeze, capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()
    finally:
        podman("image", "unmount", image, check=False)


def image_healthcheck(image: str) -> list[str]:
    """The HEALTHCHECK's test of the image (kept by building with `--format docker`)."""
    (inspected,) = json.loads(podman("image", "inspect", image).stdout)
    check = inspected["Healthcheck"]
    assert isinstance(check, dict) and check["Test"][0] == "CMD", check
    return [str(word) for word in check["Test"][1:]]


def image_healthcheck_retries(image: str) -> int:
    """The HEALTHCHECK's `--retries`: failed checks in a row before the container is unhealthy."""
    (inspected,) = json.loads(podman("image", "inspect", image).stdout)
    return int(inspected["Healthcheck"]["Retries"])


@dataclass
class Container:
    """One `podman run -d` of the image, removed by `remove()`."""

    name: str

    @classmethod
    async def run(cls, name: str, image: str, options: Sequence[str], command: Sequence[str] = ()) -> Container:
        await apodman("rm", "--force", "--time", "0", name, check=False)
        await apodman("run", "--detach", "--name", name, "--network", "host", *ULIMITS, *options, image, *command)
        return cls(name)

    def inspect(self, template: str) -> str:
        return podman("inspect", "--format", template, self.name).stdout.strip()

    async def exec(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        flags = [a for k, v in (env or {}).items() for a in ("--env", f"{k}={v}")]
        return await apodman("exec", *flags, self.name, *argv, check=False, timeout=60)

    async def logs(self) -> list[str]:
        done = await apodman("logs", self.name)
        return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]

    async def remove(self) -> None:
        await apodman("rm", "--force", "--time", "0", self.name, check=False)
