-- The journal stores a row per step instead of a row per frame: the
-- consecutive frames of one session and one turn that one commit wrote
-- (a whole one-tool turn is one row). `seq` is the first frame's and the
-- key with `session_id`; `body` is a JSON array of the frames' entries
-- (seq, kind, turn_id, request_id, created_at, and the frame, effect,
-- history and action as JSON); the other columns are what readers select
-- on (src/storage/steps.rs). A frame's index entry and insert were the
-- largest part of a group commit's work; a step's are one per turn.
-- Rows written before are carried over as steps of one frame.
CREATE TABLE journal_steps (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    turn_id    TEXT,
    started    INTEGER NOT NULL,
    request_id TEXT,
    ended      TEXT,
    actions    INTEGER NOT NULL,
    body       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO journal_steps (session_id, seq, last_seq, turn_id, started, request_id, ended,
                           actions, body, created_at)
SELECT session_id, seq, seq, turn_id,
       CASE WHEN kind = 'turn_started' THEN 1 ELSE 0 END,
       CASE WHEN kind = 'turn_started' THEN request_id END,
       CASE WHEN kind IN ('turn_completed', 'turn_failed') THEN kind END,
       CASE WHEN action IS NOT NULL THEN 1 ELSE 0 END,
       json_array(json_object('seq', seq, 'kind', kind, 'turn_id', turn_id,
                              'request_id', request_id, 'created_at', created_at,
                              'frame', json(frame), 'effect', json(effect),
                              'history', json(history), 'action', json(action))),
       created_at
FROM journal ORDER BY rowid;
DROP TABLE journal;
ALTER TABLE journal_steps RENAME TO journal;
CREATE UNIQUE INDEX journal_by_session ON journal (session_id, seq);
