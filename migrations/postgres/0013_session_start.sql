-- The shared start a session begins from, for a session that has no
-- snapshot row of its own yet. SQLite's sessions use it (their creation
-- writes no first snapshot row); on PostgreSQL it stays empty for now:
-- the first snapshot row naming the start is still written, because a
-- node of an older version may share the database during a rolling
-- upgrade and loads a session from that row. Loading reads either.
ALTER TABLE sessions ADD COLUMN start_id TEXT;
