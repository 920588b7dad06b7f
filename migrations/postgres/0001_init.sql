-- The same tables as migrations/sqlite (0001–0004 there), in one step:
-- PostgreSQL support starts with this schema.

-- Sessions: who owns them and the tokens that open them.
CREATE TABLE sessions (
    session_id      TEXT PRIMARY KEY NOT NULL,
    tenant_id       TEXT NOT NULL,
    campaign_id     TEXT NOT NULL,
    title           TEXT NOT NULL,
    player_token    TEXT NOT NULL,
    spectator_token TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    -- `public`: listed for anyone; `private` (default): known only to the
    -- holders of its tokens.
    visibility      TEXT NOT NULL DEFAULT 'private'
);
CREATE INDEX sessions_by_tenant ON sessions (tenant_id);

-- The journal: every story frame of every session, in seq order. `effect`
-- and `history` are what replay applies to the save state; `action` is set
-- for applied tool calls (the /actions log).
CREATE TABLE journal (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    turn_id    TEXT,
    kind       TEXT NOT NULL,
    request_id TEXT,
    frame      TEXT NOT NULL,
    effect     TEXT,
    history    TEXT,
    action     TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The latest snapshot of each session: the state after journal row `seq`.
CREATE TABLE snapshots (
    session_id TEXT PRIMARY KEY NOT NULL,
    seq        BIGINT NOT NULL,
    state      TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The audit ledger: one row per tool call, from any caller, whatever its
-- outcome. `site_id`, `span_id` and `user_id` are the service context of
-- calls from outside (the HTTP tool API, MCP); the game loop leaves them
-- empty.
CREATE TABLE audit (
    audit_id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id        TEXT,
    tenant_id         TEXT NOT NULL,
    trace_id          TEXT NOT NULL,
    turn_id           TEXT,
    call_id           TEXT,
    tool              TEXT NOT NULL,
    role              TEXT NOT NULL,
    args_hash         TEXT NOT NULL,
    status            TEXT NOT NULL,
    reason            TEXT,
    error_code        TEXT,
    error_message     TEXT,
    duration_us       BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    site_id           TEXT,
    span_id           TEXT,
    user_id           TEXT
);
CREATE INDEX audit_by_session ON audit (session_id, audit_id);
CREATE INDEX audit_by_trace ON audit (tenant_id, trace_id, audit_id);
