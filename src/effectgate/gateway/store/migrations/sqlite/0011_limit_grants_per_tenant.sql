-- A limit grant is its tenant's (docs/limits.md): keyed by (action_id, tenant), so another
-- tenant's operator naming the same id writes a row of their own and never replaces (nor blocks)
-- this tenant's grant. The simulator's second tenant found the takeover (tests/sim/tenants.py).
CREATE TABLE limit_grants_by_tenant (
    action_id  TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    principal  TEXT NOT NULL,
    note       TEXT NOT NULL,
    granted_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    used_at    DOUBLE PRECISION,
    PRIMARY KEY (action_id, tenant)
);
INSERT INTO limit_grants_by_tenant (action_id, tenant, principal, note, granted_at, expires_at, used_at)
    SELECT action_id, tenant, principal, note, granted_at, expires_at, used_at FROM limit_grants;
DROP TABLE limit_grants;
ALTER TABLE limit_grants_by_tenant RENAME TO limit_grants;
