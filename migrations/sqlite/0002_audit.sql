-- The audit ledger: one row per tool call, from any caller, whatever its
-- outcome.
CREATE TABLE audit (
    audit_id          INTEGER PRIMARY KEY AUTOINCREMENT,
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
    duration_us       INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
);
CREATE INDEX audit_by_session ON audit (session_id, audit_id);
