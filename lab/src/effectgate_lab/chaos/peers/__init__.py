"""The engines teams pick instead of a gateway, run for real: Restate (its server from npm, its
Python SDK) and DBOS Transact (on SQLite and on PostgreSQL). Each runs the agent's tool call in a
worker process of its own, written as the engine's documentation recommends for a payment or an
email: the provider call in a durable step (`ctx.run`, a DBOS step), with an idempotency key
derived from the engine's own identity for the step."""
