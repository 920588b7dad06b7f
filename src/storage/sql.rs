//! The SQL both dialects share, written once.
//!
//! SQLite and PostgreSQL accept the same statements here (`$N` parameters,
//! `ON CONFLICT … DO UPDATE`, `LIMIT`), but sqlx types every pool,
//! connection and row by its database, and generic code over
//! `sqlx::Database` needs a bound for every type it touches. So the
//! functions are spelled once in a macro and stamped out per dialect:
//! `queries!(sqlx::Sqlite)` in `sqlite.rs`, `queries!(sqlx::Postgres)` in
//! `postgres.rs`. What differs (connecting, fencing, and the writers: SQLite's
//! is rusqlite on a thread of its own, PostgreSQL's sends a batch as arrays)
//! stays in those files; the writers' statements that read the same in both
//! are the constants here.

/// Frames kept for resume after a reload.
pub(super) const RECENT_FRAMES: i64 = 512;

/// The writers' statements that both dialects spell the same way.
pub(super) const INSERT_INBOX: &str = "INSERT INTO inbox (session_id, turn_id, turn_no, request_id, \
     text, after_seq, created_at, seat_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
pub(super) const DELETE_INBOX: &str = "DELETE FROM inbox WHERE session_id = $1 AND turn_id = $2";
/// A snapshot replaces an older one only.
pub(super) const UPSERT_SNAPSHOT: &str = "INSERT INTO snapshots (session_id, seq, state, updated_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, \
     state = excluded.state, updated_at = excluded.updated_at WHERE excluded.seq >= snapshots.seq";
/// A snapshot chunk, unless the session has it already.
pub(super) const INSERT_CHUNK: &str = "INSERT INTO snapshot_chunks (session_id, chunk_id, body) \
     VALUES ($1, $2, $3) ON CONFLICT (session_id, chunk_id) DO NOTHING";
/// A new session; `$10` names the shared start it begins from, if it has
/// no first snapshot of its own.
pub(super) const INSERT_SESSION: &str = "INSERT INTO sessions (session_id, tenant_id, campaign_id, \
     title, player_token, spectator_token, created_at, visibility, anonymous, start_id) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
/// The anonymous sessions created before `$1` whose last journal step is
/// before it too (none: never played), oldest first, at most `$2`; each
/// dialect adds how it spells "anonymous" (so its partial index applies)
/// and, on PostgreSQL, that no node's claim on it is alive.
pub(super) fn abandoned_sessions(anonymous: &str, unclaimed: &str) -> String {
    format!(
        "SELECT s.session_id FROM sessions s WHERE {anonymous} AND s.created_at < $1 \
         AND COALESCE((SELECT j.created_at FROM journal j WHERE j.session_id = s.session_id \
         ORDER BY j.seq DESC LIMIT 1), 0) < $1 {unclaimed} ORDER BY s.created_at LIMIT $2"
    )
}
/// What deleting a session deletes, the session's row last; each runs
/// with the session's id as `$1`.
pub(super) const DELETE_SESSION: [&str; 7] = [
    "DELETE FROM journal WHERE session_id = $1",
    "DELETE FROM session_timers WHERE session_id = $1",
    "DELETE FROM snapshot_chunks WHERE session_id = $1",
    "DELETE FROM snapshots WHERE session_id = $1",
    "DELETE FROM inbox WHERE session_id = $1",
    "DELETE FROM audit WHERE session_id = $1",
    "DELETE FROM sessions WHERE session_id = $1",
];
/// A timer of the index due at `$3` (inserted or moved).
pub(super) const UPSERT_TIMER: &str = "INSERT INTO session_timers (session_id, timer_id, due_at) \
     VALUES ($1, $2, $3) ON CONFLICT (session_id, timer_id) DO UPDATE SET due_at = excluded.due_at";
/// A timer of the index due at `$3` unless the index has it already.
pub(super) const INSERT_TIMER_UNLESS_SET: &str = "INSERT INTO session_timers \
     (session_id, timer_id, due_at) VALUES ($1, $2, $3) ON CONFLICT (session_id, timer_id) DO NOTHING";
/// A timer gone from the index.
pub(super) const DELETE_TIMER: &str =
    "DELETE FROM session_timers WHERE session_id = $1 AND timer_id = $2";
/// Every timer of the index.
pub(super) const COUNT_TIMERS: &str = "SELECT COUNT(*) FROM session_timers";
/// The sessions of open sessions with a timer due at `$1` or before, the
/// soonest first, at most `$2`; each dialect adds (`{unclaimed}`) that no
/// live node holds it, on PostgreSQL.
pub(super) fn due_timers(unclaimed: &str) -> String {
    format!(
        "SELECT t.session_id, MIN(t.due_at) AS due FROM session_timers t \
         JOIN sessions s ON s.session_id = t.session_id \
         WHERE t.due_at <= $1 AND s.closed_at IS NULL {unclaimed} \
         GROUP BY t.session_id ORDER BY due LIMIT $2"
    )
}
/// The open sessions with a stored chat (acknowledged, and its turn not
/// started; or started, its row left by a crash between the two, which the
/// session deletes when it loads), with the oldest such chat's time, the
/// oldest first, at most `$1`; each dialect adds (`{unclaimed}`) that no
/// live node holds it, on PostgreSQL.
pub(super) fn waiting_chats(unclaimed: &str) -> String {
    format!(
        "SELECT i.session_id, MIN(i.created_at) AS since FROM inbox i \
         JOIN sessions s ON s.session_id = i.session_id \
         WHERE s.closed_at IS NULL {unclaimed} \
         GROUP BY i.session_id ORDER BY since LIMIT $1"
    )
}
pub(super) const INSERT_FIRST_SNAPSHOT: &str =
    "INSERT INTO snapshots (session_id, seq, state, updated_at) VALUES ($1, 0, $2, $3)";
/// A shared start, unless it is stored already (by an earlier session, or
/// another node): its id is a hash of its state, so the one stored is the
/// same. Never deleted, so a snapshot naming one always finds it.
pub(super) const INSERT_SHARED_START: &str = "INSERT INTO shared_starts (start_id, state, \
     created_at) VALUES ($1, $2, $3) ON CONFLICT (start_id) DO NOTHING";
/// One stored step of the journal (`steps.rs`; SQLite's writer runs it
/// once per step, prepared once; PostgreSQL's takes a whole batch as
/// arrays).
pub(super) const INSERT_JOURNAL_STEP: &str = "INSERT INTO journal (session_id, seq, last_seq, \
     turn_id, started, request_id, ended, actions, body, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
/// One audit row (as [`INSERT_JOURNAL_STEP`]).
pub(super) const INSERT_AUDIT_ROW: &str = "INSERT INTO audit (session_id, tenant_id, trace_id, \
     turn_id, call_id, tool, role, args_hash, status, reason, error_code, error_message, \
     duration_us, prompt_tokens, completion_tokens, created_at, site_id, span_id, user_id) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";

// The record writes' statements (`records.rs`), the same in both dialects.

/// A new site at version 1, or the whole site replaced at version + 1;
/// returns the version written.
pub(super) const PUT_SITE: &str = "INSERT INTO sites (tenant_id, site_id, \
     campaign_id, title, state, version, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, 1, $6, $7) \
     ON CONFLICT (tenant_id, site_id) DO UPDATE SET campaign_id = excluded.campaign_id, \
     title = excluded.title, state = excluded.state, version = sites.version + 1, \
     updated_at = excluded.updated_at RETURNING version";
pub(super) const UPDATE_SITE: &str = "UPDATE sites SET state = $1, \
     version = version + 1, updated_at = $2 \
     WHERE tenant_id = $3 AND site_id = $4 AND version = $5 RETURNING version";
pub(super) const FORGET_KEYS: &str = "DELETE FROM idempotency_keys WHERE created_at < $1";
pub(super) const CLAIM_KEY: &str = "INSERT INTO idempotency_keys (tenant_id, \
     idem_key, tool, request_hash, created_at) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (tenant_id, idem_key) DO NOTHING";
pub(super) const FINISH_KEY: &str = "UPDATE idempotency_keys \
     SET http_status = $1, response = $2 WHERE tenant_id = $3 AND idem_key = $4";
pub(super) const DROP_KEY: &str =
    "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2";
/// The sessions with a token stored as itself that the start rewrites
/// into its digest (`hash_stored_tokens`): a player token, or a private
/// session's spectator token, not starting with
/// [`crate::game::party::HASHED_TOKEN`]. The partial index
/// `sessions_plain_tokens` (migrations `0018_plain_tokens.sql` and
/// PostgreSQL's `0016_plain_tokens.sql`) repeats it word for word, since
/// both databases use such an index only for a query that names its
/// predicate as it is written; constants, not parameters, for the same
/// reason.
pub(super) const PLAIN_TOKENS: &str = "(substr(player_token, 1, 7) <> 'sha256:' OR \
     (visibility <> 'public' AND substr(spectator_token, 1, 7) <> 'sha256:'))";
/// Forgets the spending of the days before `$1` (the key's first column:
/// one range of the table).
pub(super) const FORGET_SPEND: &str = "DELETE FROM token_spend WHERE day < $1";
/// Adds tokens to a day's spending of one scope's key (contract §12).
pub(super) const ADD_SPEND: &str = "INSERT INTO token_spend (day, scope, spend_key, tokens) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (day, scope, spend_key) \
     DO UPDATE SET tokens = token_spend.tokens + excluded.tokens";
/// The first close of a session is the one kept.
pub(super) const CLOSE_SESSION: &str =
    "UPDATE sessions SET closed_at = $1 WHERE session_id = $2 AND closed_at IS NULL";

/// The audit columns, in the order `audit_row` reads them.
pub(super) const AUDIT_COLUMNS: &str = "audit_id, session_id, tenant_id, trace_id, turn_id, call_id, tool, role, args_hash, \
     status, reason, error_code, error_message, duration_us, prompt_tokens, completion_tokens, created_at, \
     site_id, span_id, user_id";

/// Reads the `action` JSON of an applied-action row and stamps it with its
/// seq and time, as the actions log shows it.
pub(super) fn action_entry(
    seq: i64,
    text: &str,
    created_at: i64,
) -> Result<serde_json::Value, super::StorageError> {
    let mut action: serde_json::Value =
        serde_json::from_str(text).map_err(|e| super::StorageError::Corrupt(e.to_string()))?;
    if let Some(obj) = action.as_object_mut() {
        obj.insert("seq".into(), serde_json::Value::from(seq));
        obj.insert(
            "timestamp".into(),
            serde_json::Value::from(super::rfc3339(created_at)),
        );
    }
    Ok(action)
}

/// The request ids of the actions a round's `turn_started` frame lists
/// (docs/protocol.md §8), each with the id its action was acknowledged
/// with ([`crate::game::party::action_id`]); none for the start of any
/// other turn. A round's request ids are in no column of the journal (its
/// `action_submitted` frames carry none, its turn was asked for by no one
/// chat), and the held round's are in the state: a resolved round's
/// `turn_started` is where a loading session reads them back.
pub(super) fn round_requests(
    frame: &str,
) -> Result<Vec<(crate::ids::RequestId, crate::ids::TurnId)>, super::StorageError> {
    /// What a round's `turn_started` says of its actions.
    #[derive(serde::Deserialize)]
    struct Started {
        #[serde(default)]
        round: Option<u64>,
        #[serde(default)]
        actions: Option<Vec<Acted>>,
    }
    /// One seat's place in it (`request_id` null for a seat that did not
    /// act, or acted without one).
    #[derive(serde::Deserialize)]
    struct Acted {
        seat_id: crate::ids::SeatId,
        #[serde(default)]
        request_id: Option<crate::ids::RequestId>,
    }
    let started: Started = serde_json::from_str(frame)
        .map_err(|e| super::StorageError::Corrupt(format!("a turn_started frame: {e}")))?;
    let (Some(round), Some(actions)) = (started.round, started.actions) else {
        return Ok(Vec::new());
    };
    Ok(actions
        .into_iter()
        .filter_map(|a| {
            let request_id = a.request_id?;
            Some((request_id, crate::game::party::action_id(round, &a.seat_id)))
        })
        .collect())
}

/// The condition that selects a session's journal steps holding any frame
/// after seq `$2` (session `$1`): the step that holds `$2 + 1` may start
/// at or before `$2`, so the range starts at the last step that starts at
/// or before it. Both use the key `(session_id, seq)`.
macro_rules! steps_after {
    () => {
        "session_id = $1 AND last_seq > $2 AND seq >= COALESCE((SELECT j0.seq FROM journal j0 \
         WHERE j0.session_id = $1 AND j0.seq <= $2 ORDER BY j0.seq DESC LIMIT 1), 0)"
    };
}

pub(super) use steps_after;

/// Stamps out the shared reads and batch writes for one sqlx database.
macro_rules! queries {
    ($db:ty) => {
        use serde_json::Value as _QueriesValue;
        use sqlx::Row as _;

        use $crate::storage::sql::{
            AUDIT_COLUMNS, RECENT_FRAMES, action_entry, round_requests, steps_after,
        };
        use $crate::storage::steps::{self as _steps, Entry};
        use $crate::ids::{RequestId, SeatId, SessionId, SiteId, TenantId, TraceId, TurnId};
        use $crate::storage::ops::WriteOp;
        use $crate::storage::records::RecordReads;
        use $crate::storage::{
            ActionPage, AuditPage, AuditRow, KeyRow, LoadedSession, QueuedChat, SessionMeta,
            SiteRow, StorageError, StoredRow, TailRow, Visibility, now_ms,
        };

        type Pool = sqlx::Pool<$db>;
        type DbRow = <$db as sqlx::Database>::Row;

        /// Rewrites the tokens that rows written before tokens were hashed
        /// still hold as themselves into their stored form
        /// ([`$crate::game::party::stored_token`]): every session's player
        /// token, and a private session's spectator token (a public one's
        /// stays itself: the public list gives it out). 500 rows a
        /// transaction; run at start, after the migrations. The rows left
        /// are read through an index of them alone ([`PLAIN_TOKENS`]), so
        /// a start with none left reads nothing. Each row is
        /// rewritten only if it still holds what was read, so nodes that
        /// start together on one database do each row once. Answers how
        /// many rows it rewrote.
        pub(super) async fn hash_stored_tokens(pool: &Pool) -> Result<u64, StorageError> {
            use $crate::game::party::{HASHED_TOKEN, stored_token};
            use $crate::storage::sql::PLAIN_TOKENS;
            let hashed = |token: &str| {
                if token.starts_with(HASHED_TOKEN) {
                    token.to_owned()
                } else {
                    stored_token(token)
                }
            };
            let mut rewritten = 0;
            let mut after = String::new();
            loop {
                let sql = format!(
                    "SELECT session_id, player_token, spectator_token, visibility FROM sessions \
                     WHERE session_id > $1 AND {PLAIN_TOKENS} ORDER BY session_id LIMIT 500"
                );
                // Built only from constants.
                let rows: Vec<(String, String, String, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(sql))
                        .bind(&after)
                        .fetch_all(pool)
                        .await?;
                let Some((last, ..)) = rows.last() else {
                    return Ok(rewritten);
                };
                after = last.clone();
                let mut tx = pool.begin().await?;
                for (id, player, spectator, visibility) in &rows {
                    let stored_spectator = match Visibility::from_stored(visibility) {
                        Visibility::Private => hashed(spectator),
                        Visibility::Public => spectator.clone(),
                    };
                    rewritten += sqlx::query(
                        "UPDATE sessions SET player_token = $1, spectator_token = $2 \
                         WHERE session_id = $3 AND player_token = $4 AND spectator_token = $5",
                    )
                    .bind(hashed(player))
                    .bind(stored_spectator)
                    .bind(id)
                    .bind(player)
                    .bind(spectator)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                }
                tx.commit().await?;
            }
        }

        /// Every audit row of one trace of a tenant, oldest first (at most
        /// `limit`).
        pub(super) async fn audit_by_trace(
            pool: &Pool,
            tenant_id: &TenantId,
            trace_id: &TraceId,
            limit: u32,
        ) -> Result<Vec<AuditRow>, StorageError> {
            let sql = format!(
                "SELECT {AUDIT_COLUMNS} FROM audit WHERE tenant_id = $1 AND trace_id = $2 \
                 ORDER BY audit_id LIMIT $3"
            );
            // Built only from constants.
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(tenant_id)
                .bind(trace_id)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?;
            Ok(rows
                .iter()
                .map(audit_row)
                .collect::<Result<Vec<_>, sqlx::Error>>()?)
        }

        /// A page of a session's audit ledger, oldest first.
        pub(super) async fn audit_page(
            pool: &Pool,
            session_id: &SessionId,
            after_id: i64,
            limit: u32,
        ) -> Result<AuditPage, StorageError> {
            let sql = format!(
                "SELECT {AUDIT_COLUMNS} FROM audit WHERE session_id = $1 AND audit_id > $2 \
                 ORDER BY audit_id LIMIT $3"
            );
            // Built only from constants.
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(session_id)
                .bind(after_id)
                .bind(i64::from(limit) + 1)
                .fetch_all(pool)
                .await?;
            let more = rows.len() > limit as usize;
            let entries = rows
                .iter()
                .take(limit as usize)
                .map(audit_row)
                .collect::<Result<Vec<_>, sqlx::Error>>()?;
            let next_after_id = if more {
                entries.last().map(|e| e.audit_id)
            } else {
                None
            };
            Ok(AuditPage {
                entries,
                next_after_id,
            })
        }

        pub(super) async fn session_meta(
            pool: &Pool,
            session_id: &SessionId,
        ) -> Result<Option<SessionMeta>, StorageError> {
            let row = sqlx::query(
                "SELECT session_id, tenant_id, campaign_id, title, player_token, spectator_token, \
                 created_at, visibility, closed_at, anonymous FROM sessions WHERE session_id = $1",
            )
            .bind(session_id)
            .fetch_optional(pool)
            .await?;
            row.map(|r| {
                Ok(SessionMeta {
                    session_id: r.try_get(0)?,
                    tenant_id: r.try_get(1)?,
                    campaign_id: r.try_get(2)?,
                    title: r.try_get(3)?,
                    stored_player_token: r.try_get(4)?,
                    stored_spectator_token: r.try_get(5)?,
                    created_at: r.try_get(6)?,
                    visibility: Visibility::from_stored(r.try_get(7)?),
                    closed_at: r.try_get(8)?,
                    anonymous: r.try_get(9)?,
                })
            })
            .transpose()
        }

        /// Reads what replay needs: meta, latest snapshot, later rows,
        /// recent frames.
        pub(super) async fn load_session(
            pool: &Pool,
            session_id: &SessionId,
        ) -> Result<Option<LoadedSession>, StorageError> {
            let Some(meta) = session_meta(pool, session_id).await? else {
                return Ok(None);
            };
            // The snapshot and its chunks in one statement, so one
            // consistent view of the database: a snapshot written meanwhile
            // deletes the chunks it no longer names in its own commit. A
            // session begun from a shared start has no snapshot row until
            // its first snapshot: the start is its snapshot at seq 0.
            let pieces = sqlx::query(
                "SELECT seq, state, CAST(NULL AS TEXT), CAST(NULL AS TEXT) FROM snapshots \
                 WHERE session_id = $1 UNION ALL SELECT CAST(0 AS BIGINT), st.state, \
                 CAST(NULL AS TEXT), CAST(NULL AS TEXT) FROM sessions s \
                 JOIN shared_starts st ON st.start_id = s.start_id WHERE s.session_id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM snapshots WHERE session_id = $1) \
                 UNION ALL SELECT CAST(NULL AS BIGINT), \
                 CAST(NULL AS TEXT), chunk_id, body FROM snapshot_chunks WHERE session_id = $1",
            )
            .bind(session_id)
            .fetch_all(pool)
            .await?;
            let mut snap = None;
            let mut snapshot_chunks = std::collections::HashMap::new();
            for r in pieces {
                match (r.try_get::<Option<i64>, _>(0)?, r.try_get::<Option<String>, _>(2)?) {
                    (Some(seq), _) => snap = Some((seq, r.try_get::<String, _>(1)?)),
                    (None, Some(id)) => {
                        snapshot_chunks.insert(id, r.try_get::<String, _>(3)?);
                    }
                    (None, None) => {}
                }
            }
            let (snapshot_seq, snapshot) = snap.ok_or_else(|| {
                StorageError::Corrupt(format!("session {session_id} has no snapshot"))
            })?;
            // A first snapshot naming a shared start is read as its state.
            let snapshot = match $crate::storage::formats::check_snapshot(&snapshot)? {
                None => snapshot,
                Some(start_id) => {
                    sqlx::query_scalar::<_, String>(
                        "SELECT state FROM shared_starts WHERE start_id = $1",
                    )
                    .bind(&start_id)
                    .fetch_optional(pool)
                    .await?
                    .ok_or_else(|| {
                        StorageError::Corrupt(format!(
                            "session {session_id} starts from {start_id}, which is not stored"
                        ))
                    })?
                }
            };
            // One read for both: the frames after the snapshot (replayed)
            // and the last RECENT_FRAMES (kept for resume), from the older
            // of the two starts; the newest step's last seq says where the
            // recent frames begin.
            let last_seq: Option<i64> = sqlx::query_scalar(
                "SELECT last_seq FROM journal WHERE session_id = $1 ORDER BY seq DESC LIMIT 1",
            )
            .bind(session_id)
            .fetch_optional(pool)
            .await?;
            let recent_from = last_seq.unwrap_or(0).saturating_sub(RECENT_FRAMES).max(0);
            let mut rows = Vec::new();
            let mut recent_frames = Vec::new();
            for r in sqlx::query(concat!(
                "SELECT body FROM journal WHERE ",
                steps_after!(),
                " ORDER BY seq"
            ))
            .bind(session_id)
            .bind(snapshot_seq.min(recent_from))
            .fetch_all(pool)
            .await?
            {
                for e in entries(&r)? {
                    let seq = e.seq as i64;
                    if seq > snapshot_seq {
                        rows.push(StoredRow {
                            seq: e.seq,
                            turn_id: e.turn_id.map(TurnId::from),
                            request_id: e.request_id,
                            effect: e.effect,
                            history: e.history,
                        });
                    }
                    if seq > recent_from {
                        recent_frames.push((e.seq, e.frame));
                    }
                }
            }
            // The newest step that started or ended a turn: the turn is
            // open if it started there and did not end.
            let last_turn_event = sqlx::query(
                "SELECT turn_id, ended FROM journal WHERE session_id = $1 \
                 AND (started = 1 OR ended IS NOT NULL) ORDER BY seq DESC LIMIT 1",
            )
            .bind(session_id)
            .fetch_optional(pool)
            .await?;
            let open_turn = match last_turn_event {
                Some(r) if r.try_get::<Option<String>, _>(1)?.is_none() => r.try_get(0)?,
                _ => None,
            };
            // Stored chats, each with whether its turn started (a crash
            // between its start and its row's delete); `after_seq` keeps
            // the look into the journal to the rows after each one.
            let stored = sqlx::query(
                "SELECT turn_id, turn_no, request_id, text, after_seq, created_at, seat_id, \
                 EXISTS (SELECT 1 FROM journal j \
                 WHERE j.session_id = i.session_id AND j.last_seq > i.after_seq \
                 AND j.started = 1 AND j.turn_id = i.turn_id) AS started \
                 FROM inbox i WHERE session_id = $1 ORDER BY turn_no",
            )
            .bind(session_id)
            .fetch_all(pool)
            .await?;
            let mut started_chats = Vec::new();
            let mut waiting = Vec::new();
            for r in stored {
                if r.try_get::<bool, _>(7)? {
                    started_chats.push(TurnId::from(r.try_get::<String, _>(0)?));
                } else {
                    waiting.push(r);
                }
            }
            let queued = waiting
            .into_iter()
            .map(|r| {
                Ok(QueuedChat {
                    session_id: session_id.to_owned(),
                    turn_id: r.try_get(0)?,
                    turn_no: r.try_get::<i64, _>(1)? as u64,
                    request_id: r.try_get(2)?,
                    text: r.try_get(3)?,
                    after_seq: r.try_get::<i64, _>(4)? as u64,
                    created_at: r.try_get(5)?,
                    // A row from before parties spoke for the host seat.
                    seat_id: r
                        .try_get::<Option<String>, _>(6)?
                        .map_or_else($crate::game::party::host_seat, SeatId::from),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
            Ok(Some(LoadedSession {
                queued,
                started_chats,
                open_turn,
                meta,
                snapshot_seq: snapshot_seq as u64,
                snapshot,
                snapshot_chunks,
                rows,
                recent_frames,
            }))
        }

        /// The journal rows after `after_seq`, oldest first, at most
        /// `limit` of them and at most `max_chars` characters of frames in
        /// all: what a client resuming from that seq missed, and what a
        /// node tailing the session applies. The size is counted in the
        /// database, so a long story is never read whole to be cut here.
        pub(super) async fn journal_after(
            pool: &Pool,
            session_id: &SessionId,
            after_seq: u64,
            limit: u32,
            max_chars: u64,
        ) -> Result<Vec<TailRow>, StorageError> {
            // Steps are cut in the database by their whole size (a step
            // starting within the budget is read), frames here by theirs.
            let steps = sqlx::query(concat!(
                "SELECT body FROM (SELECT seq, body, SUM(length(body)) OVER (ORDER BY seq) \
                 AS so_far FROM journal WHERE ",
                steps_after!(),
                " ORDER BY seq LIMIT $3) w WHERE so_far - length(body) < $4 ORDER BY seq"
            ))
            .bind(session_id)
            .bind(i64::try_from(after_seq).unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .bind(i64::try_from(max_chars).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?;
            let mut rows = Vec::new();
            let mut chars = 0u64;
            'steps: for r in steps {
                for e in entries(&r)? {
                    if e.seq <= after_seq {
                        continue;
                    }
                    chars += e.frame.chars().count() as u64;
                    if rows.len() >= limit as usize || chars > max_chars {
                        break 'steps;
                    }
                    rows.push(TailRow {
                        seq: e.seq,
                        frame: e.frame,
                        effect: e.effect,
                        history: e.history,
                        created_at: e.created_at,
                    });
                }
            }
            Ok(rows)
        }

        /// Request ids of the most recent turns that started, newest first
        /// (at most `limit`): a chat's with its turn, and a resolved
        /// round's actions' with the ids they were acknowledged with
        /// ([`round_requests`]), so a loaded session answers a round's
        /// request again as a duplicate, as it did before it unloaded.
        pub(super) async fn recent_request_ids(
            pool: &Pool,
            session_id: &SessionId,
            limit: i64,
        ) -> Result<Vec<(RequestId, TurnId)>, StorageError> {
            // A start without a chat's request id is a round's or a world
            // turn's: only then is its body read, for a round's actions.
            let rows = sqlx::query(
                "SELECT request_id, turn_id, CASE WHEN request_id IS NULL THEN body END \
                 FROM journal WHERE session_id = $1 AND started = 1 \
                 ORDER BY seq DESC LIMIT $2",
            )
            .bind(session_id)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let mut ids: Vec<(RequestId, TurnId)> = Vec::new();
            for r in &rows {
                if let Some(request_id) = r.try_get::<Option<RequestId>, _>(0)? {
                    ids.push((request_id, r.try_get(1)?));
                    continue;
                }
                let Some(body) = r.try_get::<Option<&str>, _>(2)? else {
                    continue;
                };
                for e in _steps::decode(body)? {
                    if e.kind == "turn_started" {
                        // Newest first, as the steps are.
                        ids.extend(round_requests(&e.frame)?.into_iter().rev());
                    }
                }
            }
            ids.truncate(usize::try_from(limit).unwrap_or(0));
            Ok(ids)
        }

        /// The frame that ended a turn (`turn_completed` or `turn_failed`),
        /// if the turn has ended.
        pub(super) async fn turn_end_frame(
            pool: &Pool,
            session_id: &SessionId,
            turn_id: &TurnId,
        ) -> Result<Option<String>, StorageError> {
            let row = sqlx::query(
                "SELECT body FROM journal WHERE session_id = $1 AND turn_id = $2 \
                 AND ended IS NOT NULL ORDER BY seq DESC LIMIT 1",
            )
            .bind(session_id)
            .bind(turn_id)
            .fetch_optional(pool)
            .await?;
            let Some(row) = row else { return Ok(None) };
            Ok(entries(&row)?
                .into_iter()
                .rev()
                .find(|e| matches!(e.kind.as_str(), "turn_completed" | "turn_failed"))
                .map(|e| e.frame))
        }

        /// A page of the applied-actions log, oldest first.
        pub(super) async fn actions(
            pool: &Pool,
            session_id: &SessionId,
            after_seq: u64,
            limit: u32,
        ) -> Result<ActionPage, StorageError> {
            // Every step read has an action; the first may have only
            // actions at or before `after_seq`. So `limit + 2` steps
            // hold `limit + 1` actions after it if there are that many.
            let steps = sqlx::query(concat!(
                "SELECT body FROM journal WHERE ",
                steps_after!(),
                " AND actions > 0 ORDER BY seq LIMIT $3"
            ))
            .bind(session_id)
            .bind(after_seq as i64)
            .bind(i64::from(limit) + 2)
            .fetch_all(pool)
            .await?;
            let mut actions: Vec<_QueriesValue> = Vec::new();
            let mut last = None;
            let mut more = false;
            'steps: for r in steps {
                for e in entries(&r)? {
                    let Some(action) = e.action.as_deref().filter(|_| e.seq > after_seq) else {
                        continue;
                    };
                    if actions.len() == limit as usize {
                        more = true;
                        break 'steps;
                    }
                    actions.push(action_entry(e.seq as i64, action, e.created_at)?);
                    last = Some(e.seq);
                }
            }
            Ok(ActionPage {
                actions,
                next_after_seq: if more { last } else { None },
            })
        }

        /// The entries of a journal step read as its first column.
        fn entries(r: &DbRow) -> Result<Vec<Entry>, StorageError> {
            _steps::decode(r.try_get::<&str, _>(0)?)
        }

        fn audit_row(r: &DbRow) -> Result<AuditRow, sqlx::Error> {
            Ok(AuditRow {
                audit_id: r.try_get(0)?,
                session_id: r.try_get(1)?,
                tenant_id: r.try_get(2)?,
                trace_id: r.try_get(3)?,
                turn_id: r.try_get(4)?,
                call_id: r.try_get(5)?,
                tool: r.try_get(6)?,
                role: r.try_get(7)?,
                args_hash: r.try_get(8)?,
                status: r.try_get(9)?,
                reason: r.try_get(10)?,
                error_code: r.try_get(11)?,
                error_message: r.try_get(12)?,
                duration_us: r.try_get(13)?,
                prompt_tokens: r.try_get(14)?,
                completion_tokens: r.try_get(15)?,
                created_at: r.try_get(16)?,
                site_id: r.try_get(17)?,
                span_id: r.try_get(18)?,
                user_id: r.try_get(19)?,
            })
        }

        impl RecordReads for Pool {
            async fn load_site(
                &self,
                tenant_id: &TenantId,
                site_id: &SiteId,
            ) -> Result<Option<SiteRow>, StorageError> {
                let row = sqlx::query(
                    "SELECT campaign_id, title, state, version, created_at, updated_at FROM sites \
                     WHERE tenant_id = $1 AND site_id = $2",
                )
                .bind(tenant_id)
                .bind(site_id)
                .fetch_optional(self)
                .await?;
                row.map(|r| {
                    Ok(SiteRow {
                        tenant_id: tenant_id.to_owned(),
                        site_id: site_id.to_owned(),
                        campaign_id: r.try_get(0)?,
                        title: r.try_get(1)?,
                        state: r.try_get(2)?,
                        version: r.try_get(3)?,
                        created_at: r.try_get(4)?,
                        updated_at: r.try_get(5)?,
                    })
                })
                .transpose()
            }

            async fn site_version(
                &self,
                tenant_id: &TenantId,
                site_id: &SiteId,
            ) -> Result<Option<i64>, StorageError> {
                Ok(sqlx::query_scalar(
                    "SELECT version FROM sites WHERE tenant_id = $1 AND site_id = $2",
                )
                .bind(tenant_id)
                .bind(site_id)
                .fetch_optional(self)
                .await?)
            }

            async fn count_sites(
                &self,
                tenant_id: &TenantId,
            ) -> Result<i64, StorageError> {
                Ok(
                    sqlx::query_scalar("SELECT COUNT(*) FROM sites WHERE tenant_id = $1")
                        .bind(tenant_id)
                        .fetch_one(self)
                        .await?,
                )
            }

            async fn load_key(
                &self,
                tenant_id: &TenantId,
                key: &str,
            ) -> Result<Option<KeyRow>, StorageError> {
                let row = sqlx::query(
                    "SELECT tool, request_hash, http_status, response, created_at \
                     FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2",
                )
                .bind(tenant_id)
                .bind(key)
                .fetch_optional(self)
                .await?;
                row.map(|r| {
                    let status: Option<i64> = r.try_get(2)?;
                    let response: Option<String> = r.try_get(3)?;
                    Ok(KeyRow {
                        tool: r.try_get(0)?,
                        request_hash: r.try_get(1)?,
                        answer: status
                            .zip(response)
                            .map(|(status, body)| (u16::try_from(status).unwrap_or(500), body)),
                        created_at: r.try_get(4)?,
                    })
                })
                .transpose()
            }

            async fn spent(&self, day: i64, scope: &str, key: &str) -> Result<i64, StorageError> {
                let tokens: Option<i64> = sqlx::query_scalar(
                    "SELECT tokens FROM token_spend WHERE day = $1 AND scope = $2 AND spend_key = $3",
                )
                .bind(day)
                .bind(scope)
                .bind(key)
                .fetch_optional(self)
                .await?;
                Ok(tokens.unwrap_or(0))
            }
        }
    };
}

pub(super) use queries;

#[cfg(test)]
mod tests {
    use super::round_requests;
    use crate::ids::{RequestId, TurnId};

    #[test]
    fn a_rounds_start_names_its_actions_request_ids_and_no_other_start_does() {
        let round = r#"{"seq":9,"type":"turn_started","turn_id":"turn_2","request_id":null,"actor_id":"pc_001","text":"Round 1","seat_id":null,"round":1,"actions":[{"seat_id":"seat_1","character_id":"pc_001","text":"look","request_id":"h-1"},{"seat_id":"seat_2","character_id":"pc_002","text":null,"request_id":null},{"seat_id":"seat_3","character_id":"pc_003","text":"roll","request_id":"c-1"}]}"#;
        assert_eq!(
            round_requests(round).unwrap(),
            [
                (RequestId::from("h-1"), TurnId::from("round_1_seat_1")),
                (RequestId::from("c-1"), TurnId::from("round_1_seat_3")),
            ]
        );
        let chat = r#"{"seq":3,"type":"turn_started","turn_id":"turn_1","request_id":"r-1","actor_id":"pc_001","text":"hi","seat_id":"seat_1"}"#;
        assert!(round_requests(chat).unwrap().is_empty());
        let world = r#"{"seq":4,"type":"turn_started","turn_id":"turn_3","request_id":null,"actor_id":"pc_001","text":"x","seat_id":null,"trigger":"timer","timer_id":"tmr_1","event":"tide"}"#;
        assert!(round_requests(world).unwrap().is_empty());
        assert!(
            round_requests("{").is_err(),
            "a frame that does not read is corrupt"
        );
    }
}
