-- Sessions: who owns them and the tokens that open them.
CREATE TABLE sessions (
    session_id      TEXT PRIMARY KEY NOT NULL,
    tenant_id       TEXT NOT NULL,
    campaign_id     TEXT NOT NULL,
    title           TEXT NOT NULL,
    player_token    TEXT NOT NULL,
    spectator_token TEXT NOT NULL,
    created_at      INTEGER NOT NULL
);
CREATE INDEX sessions_by_tenant ON sessions (tenant_id);

-- The journal: every story frame of every session, in seq order. `effect`
-- and `history` are what replay applies to the save state; `action` is set
-- for applied tool calls (the /actions log). A rowid table: rows are large
-- and appended, which rowid tables store best; the key is a separate index.
CREATE TABLE journal (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    turn_id    TEXT,
    kind       TEXT NOT NULL,
    request_id TEXT,
    frame      TEXT NOT NULL,
    effect     TEXT,
    history    TEXT,
    action     TEXT,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX journal_by_session ON journal (session_id, seq);

-- The latest snapshot of each session: the state after journal row `seq`.
CREATE TABLE snapshots (
    session_id TEXT PRIMARY KEY NOT NULL,
    seq        INTEGER NOT NULL,
    state      TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
