"""`effectgate migrate`: apply the store's missing schema migrations and exit.

The migration step of a deployment (a Kubernetes Job, a compose service run before the gateway):
it runs with a role that may change the schema, while the replicas run with `[store] migrate =
"never"` and a role that only reads and writes rows (docs/production.md)."""

from __future__ import annotations

from effectgate.gateway.config import load_config
from effectgate.gateway.observability import mask_url
from effectgate.gateway.runtime.configured import open_configured_store
from effectgate.gateway.runtime.startup import store_failure
from effectgate.gateway.store import StoreError


async def run_migrate(config_path: str) -> int:
    config = load_config(config_path)
    store = open_configured_store(config)
    store.migrate_on_open = True  # whatever [store] migrate says: applying them is this command's job
    try:
        await store.open()
    except StoreError as exc:
        raise store_failure(config, exc) from exc
    try:
        where = mask_url(config.store_url)
        if store.applied:
            print(f"{config_path}: {where}: applied {len(store.applied)} migration(s): {', '.join(store.applied)}")
        else:
            print(f"{config_path}: {where}: the schema is current; nothing to apply")
    finally:
        await store.close()
    return 0
