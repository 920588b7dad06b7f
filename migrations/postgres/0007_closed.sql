-- When an operator closed the session for good (ms since the epoch), or
-- NULL while it is open: a closed session is never loaded again, and
-- every chat, call or connection to it is refused with SESSION_CLOSED.
ALTER TABLE sessions ADD COLUMN closed_at BIGINT;
