"""The development config `make run` serves: no principals (loopback only), SQLite in its folder,
and enough of the product to try every part of it — a tool that waits for an operator's approval,
the webhook listener fed by the Stripe simulator, typed and generic tools, and the MCP front
door's schemas for the generic ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from effectgate_lab.chaos.scenarios import SCENARIOS
from effectgate_lab.devrun.layout import Ports

SECRET_ENV = "EFFECTGATE_DEV_KEY"
SECRET = "sk_test_dev_only"  # accepted by the loopback simulators, and nowhere else
WEBHOOK_SECRET_ENV = "EFFECTGATE_DEV_WEBHOOK_SECRET"
WEBHOOK_SECRET = "whsec_dev_only"
WINDOW = 1.0  # consistency window of every tool: the simulators show writes at once

TOOLS = {
    "charge_card": "effectgate.tools.v1.ChargeCard  -> Stripe simulator",
    "charge_with_approval": "effectgate.tools.v1.ChargeCard  -> Stripe simulator, after an operator approves",
    "send_email": "effectgate.tools.v1.SendEmail   -> Postmark simulator",
    "activate_customer": 'google.protobuf.Struct {"customer": "cus_1", "seats": 5}  -> CRM simulator',
    "record_invoice": 'google.protobuf.Struct {"id": "inv_1", "amount": 4200, "currency": "usd"}  -> CRM',
}

# JSON Schemas the MCP front door shows the model for the two Struct tools (typed tools derive theirs).
SCHEMAS: dict[str, dict[str, Any]] = {
    "activate_customer": {
        "type": "object",
        "properties": {"customer": {"type": "string"}, "seats": {"type": "integer", "minimum": 1}},
        "required": ["customer"],
        "additionalProperties": False,
    },
    "record_invoice": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "amount": {"type": "integer", "minimum": 1},
            "currency": {"type": "string", "minLength": 3, "maxLength": 3},
        },
        "required": ["id", "amount", "currency"],
        "additionalProperties": False,
    },
}
DESCRIPTIONS = {
    "activate_customer": "Activate a customer's seats in the CRM",
    "record_invoice": "Record an invoice in the ledger",
}


def gateway_config(ports: Ports, workdir: Path, urls: dict[str, str]) -> dict[str, Any]:
    """The config document (written as TOML by the caller); the schema files are written here."""
    crm = {
        name: SCENARIOS[name].adapter(urls["crm"], WINDOW) | {"token_env": SECRET_ENV}
        for name in ("activate_customer", "record_invoice")
    }
    mcp_tools = {}
    for name, schema in SCHEMAS.items():
        path = workdir / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2) + "\n")
        mcp_tools[name] = {"description": DESCRIPTIONS[name], "input_schema_file": str(path)}
    stripe = {
        "api_base": urls["stripe"],
        "api_key_env": SECRET_ENV,
        "webhook_secret_env": WEBHOOK_SECRET_ENV,
        "consistency_window": WINDOW,
    }
    return {
        "server": {"listen": f"127.0.0.1:{ports.gateway}", "shutdown_grace": "5s"},
        "store": {"url": f"sqlite:///{workdir / 'effectgate.db'}"},
        "gateway": {"reconcile_interval": "1s", "recheck_min": "1s"},
        "webhooks": {"listen": f"127.0.0.1:{ports.webhooks}"},
        "adapters": {
            "stripe": stripe,
            "postmark": {"base_url": urls["postmark"], "server_token_env": SECRET_ENV, "consistency_window": WINDOW},
            **crm,
        },
        "tools": {
            "charge_card": {"adapter": "stripe"},
            "charge_with_approval": {"adapter": "stripe", "approval": "required"},
            "send_email": {"adapter": "postmark"},
            "activate_customer": {"adapter": "activate_customer"},
            "record_invoice": {"adapter": "record_invoice"},
        },
        "mcp": {"tools": mcp_tools},
    }


def environment() -> dict[str, str]:
    """The secrets the config names, for the gateway's process (and the MCP front door's)."""
    return {SECRET_ENV: SECRET, WEBHOOK_SECRET_ENV: WEBHOOK_SECRET}
