"""docs/testing.md runs as written. Every Python block is a complete file named by its first line
(`# ledger.py`); all are written into one folder, and each test file among them is run there in
a child process the way its text says (`python -m unittest` for unittest, else pytest), as a
reader would run it: it must pass, every test of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_files import page_files, reader_env, write_files
from tests.mypy_kit import mypy_strict, shared_dir

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "testing.md"
FILES = page_files(PAGE)
TESTS = sorted(name for name in FILES if name.startswith("test_"))


def test_the_page_has_its_examples() -> None:
    assert {"ledger.py", "agent.py", "pytest.ini"} <= set(FILES)
    assert TESTS == ["test_agent.py", "test_ledger_gateway.py", "test_struct_tool.py"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_files(tmp_path_factory.mktemp("testing-docs"), FILES)


@pytest.mark.parametrize("name", TESTS)
def test_the_example_passes(name: str, folder: Path) -> None:
    code = FILES[name]
    if "import unittest" in code:
        argv = [sys.executable, "-m", "unittest", "-v", name.removesuffix(".py")]
    else:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
    done = subprocess.run(argv, cwd=folder, env=reader_env(), capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{name} failed:\n{out}"
    assert "warning" not in out.lower(), f"{name} printed a warning:\n{out}"
    defined = len(re.findall(r"^    (?:async )?def test_|^(?:async )?def test_", code, re.M))
    if "import unittest" in code:
        assert f"Ran {defined} tests" in out and "\nOK" in out, out
    else:
        ran = re.search(r"(\d+) passed", out)
        assert ran and "skipped" not in out and "failed" not in out, out
        assert int(ran.group(1)) >= defined, out


def test_the_examples_type_check(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    # The kit, the adapter API and the client are typed (py.typed): a reader's mypy --strict
    # checks code written against them.
    sources = sorted(n for n in FILES if n.endswith(".py"))
    done = mypy_strict(folder, sources, shared_dir(tmp_path_factory))
    assert done.returncode == 0, done.stdout + done.stderr
