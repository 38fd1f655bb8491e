"""`effectgate` as it ran before the store clock, for the bench's side-by-side comparison only.

PostgreSQL's `Store.clock` is replaced by the base class's (no clock of its own), so `StoreClock`
falls back to this host's clock and the skew watch has nothing to measure: the gateway reads
`time.time()` where the shipped one reads the database's clock. Never a way to run a replica.
"""

import runpy

from effectgate.gateway.store import Store
from effectgate.gateway.store.postgres import PostgresStore  # white-box on purpose (tests/test_house.py)

PostgresStore.clock = Store.clock  # type: ignore[method-assign]

runpy.run_module("effectgate.gateway", run_name="__main__")
