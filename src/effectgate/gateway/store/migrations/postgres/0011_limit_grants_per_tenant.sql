-- A limit grant is its tenant's (docs/limits.md): keyed by (action_id, tenant), so another
-- tenant's operator naming the same id writes a row of their own and never replaces (nor blocks)
-- this tenant's grant. The simulator's second tenant found the takeover (tests/sim/tenants.py).
ALTER TABLE limit_grants DROP CONSTRAINT limit_grants_pkey, ADD PRIMARY KEY (action_id, tenant);
