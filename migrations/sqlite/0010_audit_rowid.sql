-- The audit ledger's ids are plain rowids instead of AUTOINCREMENT ones.
-- AUTOINCREMENT kept the largest id ever given in `sqlite_sequence`, and
-- every insert read and rewrote that row: one more page in every group
-- commit, for a promise (an id never given twice, even after the newest
-- rows are deleted) that the ledger keeps anyway, since it never deletes a
-- row: a new row's id is one past the largest, as before. Ids and rows
-- are carried over unchanged; the copy takes time once, in proportion to
-- the ledger's size.
CREATE TABLE audit_rowid (
    audit_id          INTEGER PRIMARY KEY,
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
    created_at        INTEGER NOT NULL,
    site_id           TEXT,
    span_id           TEXT,
    user_id           TEXT
);
INSERT INTO audit_rowid (audit_id, session_id, tenant_id, trace_id, turn_id, call_id, tool, role,
                         args_hash, status, reason, error_code, error_message, duration_us,
                         prompt_tokens, completion_tokens, created_at, site_id, span_id, user_id)
SELECT audit_id, session_id, tenant_id, trace_id, turn_id, call_id, tool, role,
       args_hash, status, reason, error_code, error_message, duration_us,
       prompt_tokens, completion_tokens, created_at, site_id, span_id, user_id
FROM audit ORDER BY audit_id;
DROP TABLE audit;
ALTER TABLE audit_rowid RENAME TO audit;
CREATE INDEX audit_by_session ON audit (session_id, audit_id);
CREATE INDEX audit_by_trace ON audit (tenant_id, trace_id, audit_id);
