-- The sessions whose tokens an older version stored as themselves: the
-- rows the start's rewrite into digests has left to do (`sql.rs`,
-- `PLAIN_TOKENS`, whose predicate this must repeat word for word). It is
-- empty once they are done, so a start reads nothing instead of scanning
-- every session, and a new session, stored with digests, adds no entry.
CREATE INDEX sessions_plain_tokens ON sessions (session_id)
WHERE (substr(player_token, 1, 7) <> 'sha256:' OR (visibility <> 'public' AND substr(spectator_token, 1, 7) <> 'sha256:'));
