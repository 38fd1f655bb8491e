"""docs/writing-an-adapter.md opens with a complete adapter that runs as pasted: its files (the
ledger simulator, the adapter, the conformance test, pytest.ini) are written into one folder and
the test file is run there by pytest in a child process, as a reader would: every check of the
suite must pass, with no warning, and the files must type-check under mypy --strict."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from effectgate.adapters.testing import CHECKS
from tests.doc_files import page_files, reader_env, write_files
from tests.mypy_kit import mypy_strict, shared_dir

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "writing-an-adapter.md"
FILES = page_files(PAGE)


def test_the_page_opens_with_a_complete_adapter() -> None:
    assert list(FILES) == ["ledger_sim.py", "ledger_adapter.py", "test_ledger_adapter.py", "pytest.ini"]
    text = PAGE.read_text()
    # The complete example comes first: before the contract it illustrates.
    assert text.index("# ledger_adapter.py") < text.index("## The contract")
    assert "payload_type: ClassVar[type[Message]] = struct_pb2.Struct" in FILES["ledger_adapter.py"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_files(tmp_path_factory.mktemp("adapter-docs"), FILES)


def test_the_pasted_adapter_passes_every_check(folder: Path) -> None:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_ledger_adapter.py"]
    done = subprocess.run(argv, cwd=folder, env=reader_env(), capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    ran = re.search(r"(\d+) passed", out)
    assert ran and int(ran.group(1)) == len(CHECKS), out
    assert "warning" not in out.lower() and "skipped" not in out, out


def test_the_pasted_files_type_check(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    sources = sorted(n for n in FILES if n.endswith(".py"))
    done = mypy_strict(folder, sources, shared_dir(tmp_path_factory))
    assert done.returncode == 0, done.stdout + done.stderr
