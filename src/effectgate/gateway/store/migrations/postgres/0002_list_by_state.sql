-- List filtered by state (the operator's queue: UNKNOWN, AWAITING_APPROVAL) seeks its rows
-- instead of walking every action of the tenant.
CREATE INDEX IF NOT EXISTS actions_tenant_state_created ON actions (tenant, state, created_at, action_id);
