-- The journal stores a row per step instead of a row per frame: the
-- consecutive frames of one session and one turn that one commit wrote
-- (a whole one-tool turn is one row). `seq` is the first frame's and the
-- key with `session_id`; `body` is a JSON array of the frames' entries
-- (seq, kind, turn_id, request_id, created_at, and the frame, effect,
-- history and action as JSON); the other columns are what readers select
-- on (src/storage/steps.rs). Rows written before are carried over as steps
-- of one frame.
--
-- The key still fences two nodes that both think they run a session: both
-- continue from the same durable prefix, so the first row either writes
-- after it starts at the same seq, and the second commit fails.
CREATE TABLE journal_steps (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    last_seq   BIGINT NOT NULL,
    turn_id    TEXT,
    started    BIGINT NOT NULL,
    request_id TEXT,
    ended      TEXT,
    actions    BIGINT NOT NULL,
    body       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
INSERT INTO journal_steps (session_id, seq, last_seq, turn_id, started, request_id, ended,
                           actions, body, created_at)
SELECT session_id, seq, seq, turn_id,
       CASE WHEN kind = 'turn_started' THEN 1 ELSE 0 END,
       CASE WHEN kind = 'turn_started' THEN request_id END,
       CASE WHEN kind IN ('turn_completed', 'turn_failed') THEN kind END,
       CASE WHEN action IS NOT NULL THEN 1 ELSE 0 END,
       json_build_array(json_build_object('seq', seq, 'kind', kind, 'turn_id', turn_id,
                                          'request_id', request_id, 'created_at', created_at,
                                          'frame', frame::json, 'effect', effect::json,
                                          'history', history::json,
                                          'action', action::json))::text,
       created_at
FROM journal;
DROP TABLE journal;
ALTER TABLE journal_steps RENAME TO journal;
ALTER TABLE journal ADD CONSTRAINT journal_pkey PRIMARY KEY (session_id, seq);
