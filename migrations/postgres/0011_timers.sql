-- Durable timers (docs/protocol.md §9): each session's pending timers by
-- due time, written in the same commit as the journal row whose effect
-- schedules, fires or cancels them. The journal is the truth (the state
-- holds the timers); this index lets the sweeper find a session whose
-- timer is due while no node has it loaded.
CREATE TABLE session_timers (
    session_id TEXT NOT NULL,
    timer_id   TEXT NOT NULL,
    due_at     BIGINT NOT NULL,
    PRIMARY KEY (session_id, timer_id)
);
CREATE INDEX session_timers_due ON session_timers (due_at);
