"""What the Dockerfile runs, without a Docker engine: its COPY lines lay out an /app tree, its RUN
line installs into a fresh virtualenv from that tree alone, and its ENTRYPOINT + CMD serve a
mounted config while its HEALTHCHECK command reports SERVING — all read from the Dockerfile."""

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


def lay_out_app(app: Path) -> None:
    """Copies what the COPY lines name (paths relative to the build context) under `app`."""
    for line in instruction("COPY"):
        *sources, dest = line.split()
        target = app / Path(dest).relative_to("/app")
        for source in sources:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, target / src.name)


def pip_commands(app: Path, python: Path) -> list[list[str]]:
    """The RUN line's `pip install …` commands, with /app pointing at the laid-out tree."""
    (run,) = instruction("RUN")
    commands = []
    for part in run.split("&&"):
        words = shlex.split(part.replace("/app", str(app)))
        if words[:2] == ["pip", "install"] and "--upgrade" not in words:
            commands.append([str(python), "-m", "pip", "install", "--quiet", *words[2:]])
    assert commands, run
    return commands


@pytest.mark.timeout(900)
def test_the_image_installs_serves_and_passes_its_health_check(tmp_path: Path) -> None:
    app, venv = tmp_path / "app", tmp_path / "venv"
    lay_out_app(app)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    for command in pip_commands(app, python):
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
        check = [str(python) if arg == "python" else arg for arg in check]
        check = [f"127.0.0.1:{port}" if arg == "127.0.0.1:50051" else arg for arg in check]
        assert subprocess.run(check, env=env, timeout=60, check=False).returncode == 0
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr[-2000:]
    # The CMD asks for JSON logs: every line a JSON object.
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and all(json.loads(line)["severity_text"] for line in lines)
