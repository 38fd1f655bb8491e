"""A command's working directory (effectgate_lab.labkit.workdir): gone when the command ends well
or is interrupted; kept, and named on stderr, when it fails. The benches and the chaos harness
that use it are checked for what they leave in tests/test_bench*.py and tests/test_chaos*.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from effectgate_lab.labkit.workdir import temporary_workdir


def test_removed_after_a_run_that_ends_well(own_tmpdir: Path) -> None:
    with temporary_workdir("effectgate-x-", "bench") as folder:
        (folder / "gateway.log").write_text("serving\n")
        assert folder.parent == own_tmpdir and folder.name.startswith("effectgate-x-")
    assert not list(own_tmpdir.iterdir())


def test_kept_and_named_after_a_run_that_fails(own_tmpdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), temporary_workdir("effectgate-x-", "bench") as folder:
        (folder / "gateway.log").write_text("the gateway's last words\n")
        raise RuntimeError("the gateway did not start")
    assert (folder / "gateway.log").read_text() == "the gateway's last words\n"
    assert capsys.readouterr().err == f"bench: logs kept in {folder}\n"


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, asyncio.CancelledError])
def test_removed_after_an_interrupted_run(
    own_tmpdir: Path, capsys: pytest.CaptureFixture[str], interruption: type[BaseException]
) -> None:
    with pytest.raises(interruption), temporary_workdir("effectgate-x-", "bench"):
        raise interruption()
    assert not list(own_tmpdir.iterdir())
    assert capsys.readouterr().err == ""
