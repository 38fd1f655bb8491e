"""`make run`: a gateway to try the client against, running until Ctrl-C.

Starts the bundled provider simulators on loopback (Stripe, Postmark and the CRM, no injected
faults), writes a development config (no principals, SQLite) and runs `effectgate serve` on it
as a child process, then prints the address, the tools and how to call them. Ctrl-C or SIGTERM
stops the gateway (gracefully), then the simulators.

    python -m effectgate_lab.dev [--port 50051] [--dir .effectgate/dev]

The port may also come from EFFECTGATE_DEV_PORT. Each start begins with an empty store, like the
simulators: the directory keeps the config, the database and the gateway's log of the last run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.chaos.scenarios import SCENARIOS
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.postmark_sim import PostmarkSimulator
from effectgate_lab.simulators.server import SimulatorServer
from effectgate_lab.simulators.stripe_sim import StripeSimulator

SECRET_ENV = "EFFECTGATE_DEV_KEY"
SECRET = "sk_test_dev_only"  # accepted by the loopback simulators, and nowhere else
PORT_ENV = "EFFECTGATE_DEV_PORT"
DEFAULT_PORT = 50051
READY = "effectgate serving on port "
WINDOW = 1.0  # consistency window of every tool: the simulators show writes at once
TOOLS = {
    "charge_card": "effectgate.tools.v1.ChargeCard   -> Stripe simulator",
    "send_email": "effectgate.tools.v1.SendEmail    -> Postmark simulator",
    "activate_customer": 'google.protobuf.Struct {"customer": "cus_1", "seats": 5}     -> CRM simulator',
    "record_invoice": 'google.protobuf.Struct {"id": "inv_1", "amount": 4200, "currency": "usd"} -> CRM',
}


def gateway_config(port: int, workdir: Path, urls: dict[str, str]) -> dict[str, Any]:
    """Development mode (no principals: loopback only), SQLite in `workdir`, one tool per task."""
    crm = {
        name: SCENARIOS[name].adapter(urls["crm"], WINDOW) | {"token_env": SECRET_ENV}
        for name in ("activate_customer", "record_invoice")
    }
    return {
        "server": {"listen": f"127.0.0.1:{port}", "shutdown_grace": "5s"},
        "store": {"url": f"sqlite:///{workdir / 'effectgate.db'}"},
        "gateway": {"reconcile_interval": "1s", "recheck_min": "1s"},
        "adapters": {
            "stripe": {"api_base": urls["stripe"], "api_key_env": SECRET_ENV, "consistency_window": WINDOW},
            "postmark": {"base_url": urls["postmark"], "server_token_env": SECRET_ENV, "consistency_window": WINDOW},
            **crm,
        },
        "tools": {
            "charge_card": {"adapter": "stripe"},
            "send_email": {"adapter": "postmark"},
            "activate_customer": {"adapter": "activate_customer"},
            "record_invoice": {"adapter": "record_invoice"},
        },
    }


def fresh(workdir: Path) -> None:
    """Removes what the last run left (only the files this command writes)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("effectgate.db", "effectgate.db-wal", "effectgate.db-shm", "effectgate.toml", "gateway.log"):
        (workdir / name).unlink(missing_ok=True)


def banner(target: str, workdir: Path, urls: dict[str, str]) -> str:
    tools = "\n".join(f"  {name:<18} {what}" for name, what in TOOLS.items())
    sims = "\n".join(f"  {name:<9} {url}   (ledger: {url}/_sim/ledger)" for name, url in urls.items())
    return f"""effectgate dev gateway on {target}
  development mode (no tokens, loopback only), SQLite {workdir / "effectgate.db"}
  config {workdir / "effectgate.toml"}, log {workdir / "gateway.log"}

tools:
{tools}

simulators:
{sims}

call it (another shell):
  export EFFECTGATE_TARGET={target}
  python your_agent.py                      # e.g. the README's client example
  effectgate actions --target {target}      # what the gateway holds
Ctrl-C stops the gateway and the simulators.
"""


async def serve(port: int, workdir: Path) -> int:
    fresh(workdir)
    sims: dict[str, SimulatorServer] = {
        "stripe": StripeSimulator(api_key=SECRET),
        "postmark": PostmarkSimulator(server_token=SECRET),
        "crm": CrmSimulator(api_key=SECRET),
    }
    urls = {name: await sim.start() for name, sim in sims.items()}
    try:
        return await run_gateway(port, workdir, urls)
    finally:
        for sim in sims.values():
            await sim.stop()


async def run_gateway(port: int, workdir: Path, urls: dict[str, str]) -> int:
    config = write_config(gateway_config(port, workdir, urls), workdir / "effectgate.toml")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with (workdir / "gateway.log").open("ab") as log:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "effectgate.gateway", "serve", "--config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=log, env={**os.environ, SECRET_ENV: SECRET},
            start_new_session=True,  # Ctrl-C reaches this process only; it stops the gateway itself
        )  # fmt: skip
        assert child.stdout is not None
        line = (await child.stdout.readline()).decode()
        if not line.startswith(READY):
            await child.wait()
            print(f"the gateway did not start; see {workdir / 'gateway.log'}:", file=sys.stderr)
            print((workdir / "gateway.log").read_text().strip()[-2000:], file=sys.stderr)
            return 2
        print(banner(f"127.0.0.1:{line.removeprefix(READY).strip()}", workdir, urls), flush=True)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.dev", description=__doc__.split("\n\n")[0])
    default_port = int(os.environ.get(PORT_ENV) or DEFAULT_PORT)
    parser.add_argument("--port", type=int, default=default_port, help=f"gateway port (default {default_port})")
    parser.add_argument("--dir", type=Path, default=Path(".effectgate/dev"), help="config, database and log")
    args = parser.parse_args(argv)
    return asyncio.run(serve(args.port, args.dir.resolve()))


if __name__ == "__main__":
    sys.exit(main())
