-- List filtered by state (the operator's queue: UNKNOWN, AWAITING_APPROVAL) or by run seeks its
-- rows in list order instead of walking every action of the tenant.
CREATE INDEX IF NOT EXISTS actions_tenant_state_created ON actions (tenant, state, created_at, action_id);
CREATE INDEX IF NOT EXISTS actions_tenant_run_created ON actions (tenant, run_id, created_at, action_id);
