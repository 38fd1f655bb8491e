"""What the Dockerfile runs, without a Docker engine: its COPY lines lay out an /app tree (minus
what .dockerignore keeps out), its RUN lines install into a fresh virtualenv from that tree alone,
and its ENTRYPOINT + CMD serve a mounted config while its HEALTHCHECK command, aimed by
EFFECTGATE_HEALTH_TARGET, reports SERVING — all read from the Dockerfile. hadolint finds nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.labkit.children import free_port
from tests.wheelhouse import fresh_venv

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instruction(name: str) -> list[str]:
    """The lines of every `name` instruction (continuations joined)."""
    text = DOCKERFILE.replace("\\\n", " ")
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", text, re.M)]


def exec_form(line: str) -> list[str]:
    argv = json.loads(line)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def build_args() -> dict[str, str]:
    """The ARG lines' defaults (`ARG NAME=value`)."""
    return dict(line.split("=", 1) for line in instruction("ARG") if "=" in line)


def dockerignore() -> list[str]:
    """.dockerignore's patterns, as basename globs for shutil.ignore_patterns."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return sorted({line.strip().rsplit("/", 1)[-1] for line in lines if line.strip() and not line.startswith("#")})


def lay_out_app(app: Path) -> None:
    """Copies what the COPY lines name (paths relative to the build context) under `app`."""
    ignore = shutil.ignore_patterns(*dockerignore())
    for line in instruction("COPY"):
        *sources, dest = line.split()
        target = app / Path(dest).relative_to("/app")
        for source in sources:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(src, target, ignore=ignore, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, target / src.name)


def run_commands(app: Path, scratch: Path, python: Path) -> list[list[str]]:
    """The RUN lines' `pip install …` and `python …` commands, in order, with /app pointing at the
    laid-out tree, /tmp at `scratch` and the ARGs substituted; user and file housekeeping skipped."""
    args = build_args()

    def word(w: str) -> str:
        for name, value in args.items():
            w = w.replace(f"${{{name}}}", value)
        if w.startswith("/app"):
            return str(app) + w[len("/app") :]
        return str(scratch) + w[len("/tmp") :] if w.startswith("/tmp/") else w

    commands = []
    for run in instruction("RUN"):
        for part in run.split("&&"):
            words = [word(w) for w in shlex.split(part)]
            if words[:2] == ["pip", "install"]:  # this run's pip, into the venv (tests/wheelhouse.py)
                pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile"]
                commands.append([*pip, *words[2:]])
            elif words[:1] == ["python"]:
                commands.append([str(python), *words[1:]])
            else:
                assert words[0] in ("rm", "groupadd", "useradd"), words
    assert commands
    return commands


def test_hadolint_reports_nothing() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_image_is_built_in_layers_by_a_numeric_user_with_labels() -> None:
    # The base image is an argument (a digest can be pinned at build time), named before FROM.
    assert DOCKERFILE.index("ARG BASE_IMAGE=") < DOCKERFILE.index("FROM ${BASE_IMAGE}")
    args = build_args()
    assert args["VERSION"] == (ROOT / "VERSION").read_text().strip()
    assert f"pip=={args['PIP_VERSION']}" in (ROOT / "constraints.txt").read_text().splitlines()
    (user,) = instruction("USER")
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), user
    labels = " ".join(instruction("LABEL"))
    for key in ("title", "description", "licenses", "version", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels
    # Dependencies are installed from single files (metadata, constraints) before any source
    # directory is copied; the packages then go in alone.
    text = DOCKERFILE.replace("\\\n", " ")
    deps, packages = instruction("RUN")
    assert "-c /app/constraints.txt -r " in deps and "--no-deps" in packages
    before = [line for line in instruction("COPY") if text.index(f"COPY {line}") < text.index(deps)]
    assert before and all((ROOT / source).is_file() for line in before for source in line.split()[:-1])
    assert text.index("COPY src ") > text.index(deps)
    assert {"**/*.egg-info", ".venv", "**/node_modules", ".git", "build"} <= set(
        (ROOT / ".dockerignore").read_text().splitlines()
    )


@pytest.mark.timeout(900)
def test_the_image_installs_serves_and_passes_its_health_check(tmp_path: Path) -> None:
    app, venv = tmp_path / "app", tmp_path / "venv"
    lay_out_app(app)
    python = fresh_venv(venv)
    (tmp_path / "scratch").mkdir()
    for command in run_commands(app, tmp_path / "scratch", python):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    # Only what the image has: no lab (simulators, chaos, bench: the whole effectgate_lab package;
    # find_spec of a submodule would raise when its package is absent), no test code.
    lab_only = ("effectgate_lab", "pytest")
    probe = f"import importlib.util as u; print(*(u.find_spec(m) for m in {lab_only!r}))"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.split() == [
        "None"
    ] * len(lab_only)

    port = free_port()
    config = write_config(
        {
            "server": {"listen": f"127.0.0.1:{port}"},
            "store": {"url": f"sqlite:///{tmp_path}/data/effectgate.db"},
            "adapters": {"stripe": {"api_base": "http://127.0.0.1:9", "api_key_env": "STRIPE_API_KEY"}},
            "tools": {"charge_card": {"adapter": "stripe"}},
        },
        tmp_path / "effectgate.toml",
    )
    (entrypoint,) = (exec_form(line) for line in instruction("ENTRYPOINT"))
    cmd = exec_form(next(line for line in instruction("CMD") if not line.startswith('["python"')))
    cmd = [str(config) if arg == "/etc/effectgate/effectgate.toml" else arg for arg in cmd]
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "STRIPE_API_KEY": "sk_test_docker", "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [str(venv / "bin" / entrypoint[0]), *entrypoint[1:], *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        assert "serving on port" in server.stdout.readline()
        (health,) = instruction("HEALTHCHECK")
        check = exec_form(health.split("CMD", 1)[1].strip())
        # The image's default target, and the environment aims it: at a closed port it fails.
        assert "ENV EFFECTGATE_HEALTH_TARGET=127.0.0.1:50051" in DOCKERFILE
        closed = {**env, "EFFECTGATE_HEALTH_TARGET": f"127.0.0.1:{free_port()}"}
        assert subprocess.run(check, env=closed, timeout=60, check=False).returncode == 1
        aimed = {**env, "EFFECTGATE_HEALTH_TARGET": f"127.0.0.1:{port}"}
        assert subprocess.run(check, env=aimed, timeout=60, check=False).returncode == 0
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr[-2000:]
    # The CMD asks for JSON logs: every line a JSON object.
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and all(json.loads(line)["severity_text"] for line in lines)
