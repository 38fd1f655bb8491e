-- Action records: the columns the store queries on, plus the whole record as JSON (`body`).
-- Times are Unix seconds. The lease columns are authoritative over the copies inside `body`
-- (lease acquisition writes only the columns).
CREATE TABLE actions (
    action_id        TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    tool             TEXT NOT NULL,
    state            TEXT NOT NULL,
    fence            BIGINT NOT NULL DEFAULT 0,
    lease_owner      TEXT NOT NULL DEFAULT '',
    lease_expires_at DOUBLE PRECISION NOT NULL DEFAULT 0,
    next_check_at    DOUBLE PRECISION,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    body             TEXT NOT NULL
);

-- Reconciler: due re-checks and expired leases.
CREATE INDEX actions_state_next_check ON actions (state, next_check_at);
CREATE INDEX actions_state_lease ON actions (state, lease_expires_at);
-- List: one tenant oldest first, paged by (created_at, action_id).
CREATE INDEX actions_tenant_created ON actions (tenant, created_at, action_id);
CREATE INDEX actions_run ON actions (run_id);
-- Retention: old actions of one tool.
CREATE INDEX actions_tool_created ON actions (tool, created_at);
