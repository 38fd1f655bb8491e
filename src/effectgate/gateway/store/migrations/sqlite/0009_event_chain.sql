-- The audit trail (issue 34, docs/security.md): every event row names its tenant and tool (so
-- that ListEvents needs no join and outlives its action) and is linked into its tenant's hash
-- chain: `n` is its position (1, 2, ...), `prev_hash` the hash of position n - 1 and `hash` the
-- SHA-256 of prev_hash and the row's canonical encoding (store/trail/chain.py). Rows written before
-- this migration keep n = 0 and no hash: the chain starts after them.
ALTER TABLE action_events ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
ALTER TABLE action_events ADD COLUMN tool TEXT NOT NULL DEFAULT '';
ALTER TABLE action_events ADD COLUMN n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE action_events ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE action_events ADD COLUMN hash TEXT NOT NULL DEFAULT '';
UPDATE action_events SET
    tenant = COALESCE((SELECT a.tenant FROM actions a WHERE a.action_id = action_events.action_id), ''),
    tool = COALESCE((SELECT a.tool FROM actions a WHERE a.action_id = action_events.action_id), '');
-- One tenant's trail in chain order (ListEvents, audit verify, the retention's prefix prune).
CREATE INDEX IF NOT EXISTS action_events_chain ON action_events (tenant, n, seq);
-- Each tenant's chain head: the last position and its hash, advanced in every event's transaction.
CREATE TABLE IF NOT EXISTS event_heads (
    tenant    TEXT PRIMARY KEY,
    n         INTEGER NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
);
-- What retention pruned: the position and hash of the last row it deleted, per tenant, so the
-- first remaining row still links to something.
CREATE TABLE IF NOT EXISTS event_anchors (
    tenant TEXT PRIMARY KEY,
    n      INTEGER NOT NULL,
    hash   TEXT NOT NULL
);
