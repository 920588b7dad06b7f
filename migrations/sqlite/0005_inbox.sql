-- Chats taken while a turn runs, written before they are acknowledged: an
-- `ack` means the chat is durable. A row goes once its turn starts (its
-- `turn_started` row is in the journal); a row whose turn started after
-- `after_seq` but was not deleted (a crash between the two) is ignored.
CREATE TABLE inbox (
    session_id TEXT NOT NULL,
    turn_id    TEXT NOT NULL,
    turn_no    INTEGER NOT NULL,
    request_id TEXT,
    text       TEXT NOT NULL,
    after_seq  INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, turn_id)
);
