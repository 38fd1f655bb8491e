-- An action's story (issue: approvals, history, inbox): one row per event — claim, dispatch,
-- answer, read-back, operator act, expiry — written in the statement of the change it tells
-- (a data-modifying CTE) and purged with the action by retention.
CREATE TABLE IF NOT EXISTS action_events (
    seq       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action_id TEXT NOT NULL,
    at        DOUBLE PRECISION NOT NULL,
    kind      TEXT NOT NULL,
    state     TEXT NOT NULL,
    principal TEXT NOT NULL DEFAULT '',
    note      TEXT NOT NULL DEFAULT '',
    detail    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS action_events_action ON action_events (action_id, seq);
-- The approval queue's expiry: only waiting actions are in this index, so it costs the hot path
-- (actions that never wait) nothing but the predicate.
CREATE INDEX IF NOT EXISTS actions_awaiting ON actions (tool, created_at) WHERE state = 'AWAITING_APPROVAL';
-- The change feed (WatchActions): one tenant's actions in the order they last changed.
CREATE INDEX IF NOT EXISTS actions_tenant_updated ON actions (tenant, updated_at, action_id);
