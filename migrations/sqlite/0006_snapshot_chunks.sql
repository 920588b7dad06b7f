-- Snapshots in pieces: a snapshot's `state` may be a manifest that names,
-- for each list of the save state, the chunks that hold its elements in
-- order (see src/game/pieces.rs). A chunk is stored once per session under
-- the hash of its bytes, so a snapshot writes only the chunks that changed
-- since the last one; the same transaction deletes those no longer named.
CREATE TABLE snapshot_chunks (
    session_id TEXT NOT NULL,
    chunk_id   TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, chunk_id)
);
