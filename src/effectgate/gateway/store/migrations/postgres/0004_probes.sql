-- The readiness probe's heartbeat (Store.probe): a durable write that touches no action. One row
-- per probe, rewritten at every probe.
CREATE TABLE probes (
    name      TEXT PRIMARY KEY,
    probed_at DOUBLE PRECISION NOT NULL
);
-- Probes used to lease a fake action of their own; that row is no business of the actions table.
DELETE FROM actions WHERE action_id = 'effectgate-readiness-probe' AND tool = '__readiness_probe__';
