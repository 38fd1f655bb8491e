-- Limit grants (docs/limits.md): an operator's leave for one action id to pass its tool's limits
-- once. The reservation that a limit would refuse takes the grant (sets used_at) and is counted
-- without the check, in the same transaction; a new grant for the same id replaces a used one.
CREATE TABLE limit_grants (
    action_id  TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    principal  TEXT NOT NULL,
    note       TEXT NOT NULL,
    granted_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    used_at    DOUBLE PRECISION
);
