-- Limits (docs/limits.md): one counter row per (tenant, tool, currency, bucket), bucket
-- `w:<window start>` or `r:<run id>`, updated in the claim's transaction; and one reservation per
-- action generation, which says what it added to which buckets and whether it still holds it.
CREATE TABLE limit_counters (
    tenant   TEXT NOT NULL,
    tool     TEXT NOT NULL,
    currency TEXT NOT NULL,
    bucket   TEXT NOT NULL,
    effects  BIGINT NOT NULL,
    spent    BIGINT NOT NULL,
    PRIMARY KEY (tenant, tool, currency, bucket)
);
CREATE TABLE reservations (
    action_id   TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    tenant      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    currency    TEXT NOT NULL,
    amount      BIGINT NOT NULL,
    -- The bucket keys, one per line.
    buckets     TEXT NOT NULL,
    held        INTEGER NOT NULL,
    forced      INTEGER NOT NULL,
    reserved_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (action_id, generation)
);
