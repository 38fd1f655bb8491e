-- Action records: the columns the store queries on, plus the whole record as JSON (`body`).
-- Times are Unix seconds. The lease columns are authoritative over the copies inside `body`.
-- IF NOT EXISTS: databases made before migrations existed already have exactly this schema,
-- so this first migration adopts them unchanged.
CREATE TABLE IF NOT EXISTS actions (
    action_id        TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    tool             TEXT NOT NULL,
    state            TEXT NOT NULL,
    fence            INTEGER NOT NULL,
    lease_owner      TEXT NOT NULL,
    lease_expires_at REAL NOT NULL,
    next_check_at    REAL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    body             TEXT NOT NULL
);

-- Reconciler: due re-checks and expired leases.
CREATE INDEX IF NOT EXISTS actions_due_unknown ON actions (state, next_check_at);
CREATE INDEX IF NOT EXISTS actions_due_lease ON actions (state, lease_expires_at);
-- List: one tenant oldest first, paged by (created_at, action_id).
CREATE INDEX IF NOT EXISTS actions_tenant_created ON actions (tenant, created_at, action_id);
CREATE INDEX IF NOT EXISTS actions_run ON actions (run_id);
-- Retention: old actions of one tool.
CREATE INDEX IF NOT EXISTS actions_tool_created ON actions (tool, created_at);
