"""Shared fixtures. PostgreSQL: a throw-away server started once per session (see tests/pg.py),
or the server named by EFFECTGATE_TEST_PG_DSN, and a fresh database per test."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import cli_forks, cpu_meter, harness, pg, slow_first, wheelhouse
from tests.harness import API_KEY
from tests.store_backends import Backend, PostgresBackend, SqliteBackend

# Tests send SIGINT (Ctrl-C) to the processes they start and expect it handled. A suite started
# in the background (`make test &`, nohup, some CI runners and tool harnesses) inherits SIGINT
# ignored, and an ignored signal stays ignored across fork and exec: the CLI, a --watch or
# `make run` would never see the Ctrl-C and run on to a timeout. A handled signal is reset to the
# default in a child, as in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _missing(reason: str) -> None:
    # In CI a missing service is a failure: a skipped store test would hide a broken backend.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_bindir() -> Path:
    bindir = pg.find_bindir()
    if bindir is None:
        _missing("PostgreSQL server binaries not found (scripts/install_test_services.sh installs them)")
    assert bindir is not None
    return bindir


@pytest.fixture(scope="session")
def pg_admin_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a superuser (or CREATEDB) login on the session's PostgreSQL server."""
    external = os.environ.get(pg.ENV_DSN)
    if external:
        yield external
        return
    # A copy of the worker's template cluster (pg_template), not an initdb of its own: the copy
    # is a tenth of initdb's CPU, and a worker with private servers needs the template anyway.
    server = pg.start_server(request.getfixturevalue("pg_bindir"), template=request.getfixturevalue("pg_template"))
    try:
        yield server.dsn
    finally:
        server.destroy()


@pytest.fixture
async def pg_dsn(pg_admin_dsn: str) -> AsyncIterator[str]:
    """DSN of a fresh, empty database, dropped after the test."""
    name, dsn = await pg.create_database(pg_admin_dsn)
    try:
        yield dsn
    finally:
        await pg.drop_database(pg_admin_dsn, name)


@pytest.fixture(scope="session")
def pg_template(pg_bindir: Path) -> Iterator[Path]:
    """A cluster initdb made once per worker and never started: private servers are copies of it
    (a copy of the directory instead of an initdb each)."""
    cluster = pg.PgServer(pg_bindir)
    try:
        yield cluster.data
    finally:
        cluster.destroy()


@pytest.fixture
def pg_private_server(pg_bindir: Path, pg_template: Path) -> Iterator[pg.PgServer]:
    """A server of the test's own (a fresh cluster, copied from the template), for tests that stop
    or restart it."""
    server = pg.start_server(pg_bindir, template=pg_template)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def pg_restartable_server(pg_bindir: Path, pg_template: Path) -> Iterator[pg.PgServer]:
    """A server of the test's own listening on a Unix socket in its private directory only, for
    tests that stop it and start it again: the clients keep their DSN, and no other process can
    take that address in between (a freed TCP port can be taken by anyone, e.g. a second suite)."""
    server = pg.start_server(pg_bindir, template=pg_template, tcp=False)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A store backend harness on a fresh database: SQLite file or PostgreSQL database."""
    chosen: Backend
    if request.param == "sqlite":
        chosen = SqliteBackend(tmp_path)
    else:
        chosen = PostgresBackend(request.getfixturevalue("pg_admin_dsn"))
        await chosen.create()
    try:
        yield chosen
    finally:
        await chosen.aclose()


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    """A Stripe simulator on loopback whose search shows an intent 0.3 s after it is created."""
    simulator = StripeSimulator(api_key=API_KEY, search_lag=0.3)
    await simulator.start()
    yield simulator
    await simulator.stop()


@pytest.fixture(scope="session")
def forks() -> Iterator[cli_forks.CliForks]:
    """`effectgate` commands as forks of one process that loaded the command line once
    (tests/cli_forks.py), one such process per test process (xdist worker) for every module that
    asks for it: each command is a fork with its own argv, environment and working directory, so
    the modules share nothing but the imports (~1.8 s of CPU each driver)."""
    driver = cli_forks.CliForks()
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def own_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty temporary directory that this test's commands use as theirs (`TMPDIR` for child
    processes, `tempfile.tempdir` in this one), so the test can see what they leave behind.
    Made beside the others (not in pytest's tmp_path, which is 0700: PostgreSQL runs as the
    postgres user under root and must reach its data directory), removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="effectgate-test-tmpdir-"))
    folder.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def wheelhouse_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdists and wheels of every distribution, built once for the whole run (tests/wheelhouse.py)."""
    return wheelhouse.built_once(tmp_path_factory)


def shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope in ("package", "module", "class") for d in defs)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the known-slow tests first, dealt out to the workers (tests/slow_first.py)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or not slow_first.LIST.exists():
        return  # one process: the collected order
    known = slow_first.known_slow(slow_first.LIST.read_text())
    slow_modules = {nodeid.split("::", 1)[0] for nodeid in known}
    for item in items:  # the tests that wait for the run's wheelhouse run in the share that builds it
        if "wheelhouse_dir" in getattr(item, "fixturenames", ()):
            known[item.nodeid] = slow_first.Slow(known.get(item.nodeid, slow_first.Slow(60, "")).seconds, "wheelhouse")
        elif (module := item.nodeid.split("::", 1)[0]) in slow_modules and shares_a_module_fixture(item):
            # A module's tests that share a fixture built once per module (a gateway, 19 failing
            # starts) stay together: dealt apart, each piece would build it again.
            known[item.nodeid] = slow_first.Slow(known.get(item.nodeid, slow_first.Slow(0, "")).seconds, module)
    nodeids = {id(item): item.nodeid for item in items}
    items[:] = slow_first.slow_first(items, nodeids, known, int(workerinput["workercount"]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    cpu_meter.started(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    if call.when == "teardown":  # before the teardown's report: JUnit takes its properties from it
        cpu_meter.finished(item)
    yield


@pytest.fixture(autouse=True)
def no_gateway_left_behind() -> Iterator[None]:
    """Kills every `effectgate serve` child a test started and did not stop (a failed assertion
    between start and stop): a live child keeps its output reader blocked, and with it the
    worker's event loop at close — one failure would hang the whole run."""
    yield
    while harness.LIVE:
        child = harness.LIVE.pop()
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait(10)
