-- A session that begins unchanged from a shared start names it here and
-- has no snapshot row until its first snapshot is due: its creation
-- writes one row, not two (and not the snapshots index's page). Loading
-- reads the start as the snapshot at seq 0 when the session has no
-- snapshot row. Sessions made before this column keep their first
-- snapshot, which names the start itself, and load as they always did.
ALTER TABLE sessions ADD COLUMN start_id TEXT;
