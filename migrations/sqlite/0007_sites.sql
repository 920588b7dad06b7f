-- Sites (PROTOCOL.md §7.2): a tenant's NPC and content service without a
-- game session. `state` is the site's whole save state as JSON (the
-- campaign it was given plus the drafts and events its tools wrote);
-- `version` grows by one with every write, and a write names the version
-- it read, so two nodes never overwrite each other's.
CREATE TABLE sites (
    tenant_id   TEXT NOT NULL,
    site_id     TEXT NOT NULL,
    campaign_id TEXT NOT NULL,
    title       TEXT NOT NULL,
    state       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, site_id)
);

-- Idempotency keys of service tool calls (`request_id` in the body or
-- `Idempotency-Key`): the first call claims its key before it runs and
-- stores its answer when done; a retry with the same key gets that answer
-- instead of running again. `http_status` is NULL while the first call
-- runs. Keys are forgotten after a day.
CREATE TABLE idempotency_keys (
    tenant_id    TEXT NOT NULL,
    idem_key     TEXT NOT NULL,
    tool         TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    http_status  INTEGER,
    response     TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);
