-- Notifications (docs/notifications.md). The outbox of action events is `action_events` itself:
-- the deliverer keeps, per tenant, the chain position `n` it has read up to (`notify_cursors`),
-- and moves what it read into `notify_outbox` (one row per sink and event) in the transaction that
-- advances the cursor. Events that are not action events (limit denials, breaker openings,
-- webhook forgeries) are written straight into `notify_outbox`. A row leaves the outbox when its
-- sink took it; after `max_attempts` it stays, `failed`, for `effectgate notify retry`.
CREATE TABLE IF NOT EXISTS notify_cursors (
    tenant TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
);
-- One row: the deliverer's lease (one replica delivers) and, by existing, the mark that the
-- cursors were set at the chains' heads when notifications first ran (no history is replayed).
CREATE TABLE IF NOT EXISTS notify_state (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS notify_outbox (
    sink       TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    created_at REAL NOT NULL,
    body       TEXT NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    next_at    REAL NOT NULL,
    last_error TEXT NOT NULL DEFAULT '',
    failed     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sink, event_id)
);
CREATE INDEX IF NOT EXISTS notify_outbox_due ON notify_outbox (failed, next_at);
