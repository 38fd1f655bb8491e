"""Runs one `make run`: the folder's lock and the ports first (nothing is touched before both are
ours), then the simulators on their fixed ports, the config, and `effectgate serve` as a child
process until Ctrl-C or SIGTERM (a graceful stop: in-flight actions finish)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path

from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.devrun.banner import banner
from effectgate_lab.devrun.config import SECRET, WEBHOOK_SECRET, environment, gateway_config
from effectgate_lab.devrun.layout import DevError, Ports, fresh, locked, write_state
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.postmark_sim import PostmarkSimulator
from effectgate_lab.simulators.server import SimulatorServer
from effectgate_lab.simulators.stripe_sim import StripeSimulator

READY = "effectgate serving on port "


def command_prefix(name: str) -> str:
    """How this shell reaches `name` (`effectgate`, `python`) of this environment: its name when
    PATH finds this environment's, else the path beside this interpreter (a virtualenv that was
    not activated), relative to the current folder when it is below it."""
    script = Path(sys.executable).parent / name
    on_path = shutil.which(name)
    if on_path and os.path.abspath(on_path) == os.path.abspath(script):  # a link to one Python is not this venv
        return name
    with contextlib.suppress(ValueError):
        return str(Path(sys.executable).parent.relative_to(Path.cwd()) / name)
    return str(script)


async def serve(port: int, workdir: Path) -> int:
    ports = Ports.around(port)
    with locked(workdir):
        if taken := ports.taken():
            raise DevError(f"cannot start: port(s) in use: {', '.join(taken)} (stop what holds them, or use --port)")
        fresh(workdir)
        stripe = StripeSimulator(api_key=SECRET)
        sims: dict[str, SimulatorServer] = {
            "stripe": stripe,
            "postmark": PostmarkSimulator(server_token=SECRET),
            "crm": CrmSimulator(api_key=SECRET),
        }
        # Every succeeded charge is announced, signed, to the gateway's webhook listener.
        stripe.webhooks.url = f"http://127.0.0.1:{ports.webhooks}/webhooks/stripe"
        stripe.webhooks.secret = WEBHOOK_SECRET
        stripe.webhooks.delay = 1.0
        urls: dict[str, str] = {}
        try:
            for name, sim in sims.items():
                urls[name] = await sim.start(getattr(ports, name))
            return await run_gateway(ports, workdir, urls)
        finally:
            for sim in sims.values():
                await sim.stop()


async def run_gateway(ports: Ports, workdir: Path, urls: dict[str, str]) -> int:
    config = write_config(gateway_config(ports, workdir, urls), workdir / "effectgate.toml")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with (workdir / "gateway.log").open("ab") as log:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "effectgate.gateway", "serve", "--config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=log, env={**os.environ, **environment()},
            start_new_session=True,  # Ctrl-C reaches this process only; it stops the gateway itself
        )  # fmt: skip
        assert child.stdout is not None
        line = (await child.stdout.readline()).decode()
        if not line.startswith(READY):
            await child.wait()
            print(f"the gateway did not start; see {workdir / 'gateway.log'}:", file=sys.stderr)
            print((workdir / "gateway.log").read_text().strip()[-2000:], file=sys.stderr)
            return 2
        write_state(workdir, ports, config=str(config), **{f"{name}_url": url for name, url in urls.items()})
        print(banner(ports, workdir, urls, command_prefix("effectgate"), command_prefix("python")), flush=True)
        exited = asyncio.ensure_future(child.wait())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([exited, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not exited.done():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)  # a graceful stop: in-flight actions finish
            try:
                await asyncio.wait_for(asyncio.shield(exited), 30)
            except TimeoutError:
                child.kill()
                await exited
            print("stopped", flush=True)
            return 0
        print(f"the gateway exited ({child.returncode}); see {workdir / 'gateway.log'}", file=sys.stderr)
        return 1
