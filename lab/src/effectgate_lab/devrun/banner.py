"""What `make run` prints once the gateway answers: where everything is, and commands that work
as printed (with the path of `effectgate` when the virtualenv is not activated)."""

from __future__ import annotations

from pathlib import Path

from effectgate_lab.devrun.config import TOOLS
from effectgate_lab.devrun.layout import DEFAULT_PORT, DEFAULT_ROOT, Ports


def banner(ports: Ports, workdir: Path, urls: dict[str, str], effectgate: str, python: str) -> str:
    target = f"127.0.0.1:{ports.gateway}"
    tools = "\n".join(f"  {name:<21} {what}" for name, what in TOOLS.items())
    sims = "\n".join(f"  {name:<9} {url}   (ledger: {url}/_sim/ledger)" for name, url in urls.items())
    trigger = f"{effectgate} dev trigger" + ("" if ports.gateway == DEFAULT_PORT else f" --port {ports.gateway}")
    if workdir.parent != DEFAULT_ROOT.resolve():  # `make run --dir ELSEWHERE`: the trigger must find it
        trigger += f" --dir {workdir.parent}"
    commands = [
        (f"{python} your_agent.py", "e.g. the README's client example"),
        (f"{effectgate} actions", "what the gateway holds"),
        (f'{effectgate} approve ACTION_ID --note "looks right"', "a charge_with_approval waiting for you"),
    ]
    triggers = [
        (f"{trigger} lost-answer", "charges, then drops the answer: the gateway reads it back"),
        (f"{trigger} error-500", "charges, then answers 500"),
        (f"{trigger} slow", "answers after 5 s, longer than a short agent deadline"),
        (f"{trigger} webhook ACTION_ID", "a signed payment_intent.succeeded for that action, now"),
    ]
    width = max(len(command) for command, _ in commands + triggers) + 2
    call = "\n".join(f"  {command:<{width}}# {why}" for command, why in commands)
    happen = "\n".join(f"  {command:<{width}}# {why}" for command, why in triggers)
    return f"""effectgate dev gateway on {target}
  each start is fresh: the store of the last run on this port was removed
  development mode (no tokens, loopback only), SQLite {workdir / "effectgate.db"}
  config {workdir / "effectgate.toml"}, log {workdir / "gateway.log"}
  webhooks http://127.0.0.1:{ports.webhooks}/webhooks/stripe (the Stripe simulator signs and sends them)

tools:
{tools}

simulators:
{sims}

call it (another shell):
  export EFFECTGATE_TARGET={target} EFFECTGATE_CONFIG={workdir / "effectgate.toml"}
{call}

make things happen (the Stripe simulator's next charge; docs/testing.md lists the simulators' faults):
{happen}
Ctrl-C stops the gateway and the simulators.
"""
