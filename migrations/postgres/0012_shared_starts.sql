-- Start states stored once for every session that begins unchanged from
-- one (a built-in campaign's), named by a hash of their JSON: such a
-- session's first snapshot is {"format":2,"start":"<start_id>"} instead of
-- a copy of the state. Rows are never deleted. First snapshots written
-- before this table, whole states, are read as they always were.
CREATE TABLE shared_starts (
    start_id   TEXT PRIMARY KEY NOT NULL,
    state      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
