-- Which node runs each session, under a lease. A node claims a session by
-- bumping its epoch (only once the last owner's lease has run out, or when
-- it is the owner already); every journal write checks, in its own
-- transaction, that the epoch it was loaded under is still the current one.
-- So an owner that was paused or cut off past its lease writes nothing more
-- once another node has claimed: the fence is in the data.
CREATE TABLE session_owners (
    session_id  TEXT PRIMARY KEY NOT NULL,
    node_id     TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    -- The database's clock decides, so nodes' clocks need not agree.
    lease_until TIMESTAMPTZ NOT NULL
);
CREATE INDEX session_owners_by_node ON session_owners (node_id);
