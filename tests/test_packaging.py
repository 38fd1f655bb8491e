"""The production wheel is lean: the gateway's wheel (with the protos' and the client's) in a fresh
virtualenv brings no simulator, chaos harness, demo or benchmark, no provider library (nor
aiohttp, which the Stripe extra brings) and no test runner; an adapter whose library is missing
names the extra to install, in one line. `python -m build` makes every distribution, and its
wheels install and serve. The wheels are built once per run (tests/wheelhouse.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from effectgate_lab.chaos.config_writer import write_config
from tests.wheelhouse import DISTRIBUTIONS, RELEASE, fresh_venv, pip_install, wheel

ABSENT = (
    "effectgate_lab.simulators",
    "effectgate_lab.chaos",
    "effectgate_lab.bench",
    "effectgate_lab.demo",
    "aiohttp",
    "stripe",
    "aiosmtplib",
    "asyncpg",
    "pytest",
)


def minimal_config(tmp_path: Path) -> Path:
    """A gateway config that serves (SQLite, a Stripe adapter it never calls)."""
    return write_config(
        {
            "server": {"listen": "127.0.0.1:0"},
            "store": {"url": f"sqlite:///{tmp_path}/eg.db"},
            "adapters": {"stripe": {"api_base": "http://127.0.0.1:9", "api_key_env": "STRIPE_API_KEY"}},
            "tools": {"charge_card": {"adapter": "stripe"}},
        },
        tmp_path / "effectgate.toml",
    )


@pytest.mark.timeout(900)
def test_the_gateway_wheel_is_the_gateway_alone(tmp_path: Path, wheelhouse_dir: Path) -> None:
    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    gateway = [wheel(wheelhouse_dir, name) for name in ("effectgate-protos", "effectgate-client", "effectgate")]
    done = subprocess.run(pip_install(python, *map(str, gateway)), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # find_spec of a submodule imports its parent: an absent parent (effectgate_lab) means absent.
    probe = (
        "import importlib.util as u, sys\n"
        "def found(m):\n"
        "    try:\n"
        "        return u.find_spec(m) is not None\n"
        "    except ModuleNotFoundError:\n"
        "        return False\n"
        "print(' '.join(m for m in sys.argv[1:] if found(m)))"
    )
    present = subprocess.run([str(python), "-c", probe, *ABSENT], capture_output=True, text=True, check=True)
    assert present.stdout.strip() == ""
    # The test kit ships with the gateway and needs no test runner; a store backend whose driver
    # is missing names its extra.
    kit = (
        "import effectgate.testing\n"
        "from effectgate.gateway.store import open_store\n"
        "try:\n"
        "    open_store('postgresql://eg@127.0.0.1/eg')\n"
        "except ValueError as exc:\n"
        "    print(exc)"
    )
    lean = subprocess.run([str(python), "-c", kit], capture_output=True, text=True, timeout=120)
    assert lean.returncode == 0, lean.stderr[-3000:]
    assert "pip install 'effectgate[postgres]'" in lean.stdout
    # The stubs come from effectgate-protos and the client from effectgate-client, never twice.
    shipped = "import importlib.metadata as m; print(*sorted({'/'.join(f.parts[:2]) for f in m.files('effectgate')}))"
    parts = subprocess.run([str(python), "-c", shipped], capture_output=True, text=True, check=True).stdout.split()
    assert not {"effectgate/client", "effectgate/v1", "effectgate/tools"} & set(parts), parts

    config = minimal_config(tmp_path)
    check = subprocess.run(
        [str(venv / "bin" / "effectgate"), "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"STRIPE_API_KEY": "sk_test_x", "PATH": "/usr/bin:/bin"},
    )
    assert check.returncode == 2
    assert len(check.stderr.strip().splitlines()) == 1 and "effectgate[stripe]" in check.stderr
    assert "Traceback" not in check.stderr


@pytest.mark.timeout(900)
def test_built_wheels_and_sdists_install_in_a_fresh_venv_and_serve(tmp_path: Path, wheelhouse_dir: Path) -> None:
    """`python -m build` makes an sdist and, from it, a wheel of every distribution (the run's
    wheelhouse); the wheels install (dependencies at constraints.txt) into a fresh virtualenv whose
    `effectgate serve` answers SERVING, and whose `--version` is the VERSION file's."""
    dist, release = wheelhouse_dir, RELEASE
    stems = {name.replace("-", "_") + f"-{release}" for name in DISTRIBUTIONS}
    assert {p.name for p in dist.iterdir()} == {f"{s}{ext}" for s in stems for ext in (".tar.gz", "-py3-none-any.whl")}

    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    effectgate = venv / "bin" / "effectgate"
    done = subprocess.run(
        pip_install(python, *map(str, dist.glob("*.whl"))), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown = subprocess.run([str(effectgate), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.strip() == f"effectgate {release} (client {release})"
    # Installed from wheels, not from this checkout.
    probe = [str(python), "-c", "import effectgate.gateway as g; print(g.__file__)"]
    where = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=True)
    assert where.stdout.startswith(str(venv)), where.stdout

    config = minimal_config(tmp_path)
    env = {"STRIPE_API_KEY": "sk_test_x", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [str(effectgate), "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving on port" in line, line
        port = line.split()[-1]
        health = [str(python), "-m", "effectgate.gateway.runtime.healthcheck", f"127.0.0.1:{port}"]
        assert subprocess.run(health, env=env, timeout=60, check=False).returncode == 0
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr[-2000:]
