-- Whether the session was created without a key (tenant `default`): such
-- sessions are deleted, with their journal, once unplayed for
-- QUESTD_ANONYMOUS_RETENTION_HOURS. Sessions created before this column
-- existed cannot be told apart and count as keyed: they are kept.
ALTER TABLE sessions ADD COLUMN anonymous BOOLEAN NOT NULL DEFAULT FALSE;
-- What the retention sweep reads: the anonymous sessions, oldest first.
CREATE INDEX sessions_anonymous_by_age ON sessions (created_at) WHERE anonymous;
