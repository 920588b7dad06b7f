-- Whether a session is listed for anyone (`public`) or known only to the
-- holders of its tokens (`private`, the default).
ALTER TABLE sessions ADD COLUMN visibility TEXT NOT NULL DEFAULT 'private';
