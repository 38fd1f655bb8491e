-- What the provider said on its own (docs/webhooks.md): one row per webhook event applied, so
-- that an event id is applied once (a second delivery of the same id is refused as a replay).
CREATE TABLE IF NOT EXISTS provider_events (
    source      TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    action_id   TEXT NOT NULL,
    kind        TEXT NOT NULL,
    received_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (source, event_id)
);
-- How long after a confirmed write the provider's read API first showed it (docs/webhooks.md,
-- "A consistency window that learns"), per lag key (the adapter's name unless a tool names one).
CREATE TABLE IF NOT EXISTS read_lags (
    lag_key     TEXT NOT NULL,
    observed_at DOUBLE PRECISION NOT NULL,
    lag         DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS read_lags_by_key ON read_lags (lag_key, observed_at);
