//! PostgreSQL storage, for deployments of several nodes on one database
//! (`QUESTD_DATABASE_URL=postgres://…`). A pool for reads and one writer
//! connection for the group commits, as on SQLite; a commit is durable
//! when PostgreSQL acknowledges it (`synchronous_commit` is on by default).

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

use std::collections::{HashMap, HashSet};

use super::ops::{Committer, QueuedRecord, RecordWrite};
use super::sql::{self, queries};
use super::steps;
use super::{Epoch, FirstSnapshot, JournalNotice, JournalRow, Node, TimerIndex, formats};
use crate::ids::NodeId;

queries!(sqlx::Postgres);

/// Read connections of the pool at most.
const READ_CONNECTIONS: u32 = 8;

/// Connects to the database at `url` and runs its migrations: the read pool
/// and the writer. Refuses a database that does not make commits durable
/// ([`durable_commits`]).
pub(super) async fn open(url: &str, node: Node) -> Result<(PgPool, PgCommitter), StorageError> {
    let options = PgConnectOptions::from_str(url)?;
    // Migrations run on a connection of their own, without the timeouts
    // below: a migration of a big database may rightly take long.
    let mut migrating = super::bounded(node.db_timeout, "connecting", async {
        Ok(PgConnection::connect_with(&options).await?)
    })
    .await?;
    sqlx::migrate!("migrations/postgres")
        .run(&mut migrating)
        .await?;
    drop(migrating);
    let options = bounded_on_the_server(options, node.db_timeout);
    // Every read connection is opened at once: opening one (TLS, SCRAM)
    // takes tens of ms, which a tail's or a resume's read would wait for.
    // Waiting for one is bounded like any wait on the database; the reads
    // themselves are bounded by the store (`Store::bounded`).
    let pool = PgPoolOptions::new()
        .max_connections(READ_CONNECTIONS)
        .min_connections(READ_CONNECTIONS)
        .acquire_timeout(node.db_timeout)
        .connect_with(options.clone())
        .await?;
    super::hashed_tokens(hash_stored_tokens(&pool).await?);
    let mut committer = PgCommitter {
        options,
        conn: None,
        node,
    };
    let setting = committer.connection().await?.1;
    tracing::info!(
        synchronous_commit = %setting,
        "the journal writer's commits are durable"
    );
    Ok((pool, committer))
}

/// `options` with the server, too, ending what waits longer than `limit`:
/// a statement (`statement_timeout`), and a transaction left open between
/// statements (`idle_in_transaction_session_timeout`). The second matters
/// when a node is cut off mid-transaction: the server would otherwise hold
/// the transaction, and the locks of its rows, until the connection's TCP
/// keepalive ends it (hours by default), and a commit held in the network
/// could still land once the cut heals. With it the server rolls it back
/// and closes the connection once `limit` has passed.
fn bounded_on_the_server(options: PgConnectOptions, limit: Duration) -> PgConnectOptions {
    let ms = limit.as_millis().to_string();
    options.options([
        ("statement_timeout", ms.as_str()),
        ("idle_in_transaction_session_timeout", ms.as_str()),
    ])
}

/// Whether PostgreSQL's `synchronous_commit`, as a connection sees it,
/// makes a commit durable before it is acknowledged: anything but `off`
/// (`on`, `local`, `remote_write`, `remote_apply` all flush the commit to
/// the primary's disk first). With `off`, a crash of the database loses
/// commits questd has already acknowledged to players.
fn durable_commits(setting: &str) -> bool {
    !setting.eq_ignore_ascii_case("off")
}

/// What [`PgCommitter`] answers when the database does not make its
/// commits durable.
fn not_durable(setting: &str) -> StorageError {
    StorageError::Database(format!(
        "PostgreSQL's synchronous_commit is {setting} for questd's connection: a commit \
         would be acknowledged before it is durable. Set it to on (the default)"
    ))
}

/// The writer's connection, opened again when it breaks (a database
/// restart or failover, a network cut): the writer outlives its connection.
pub(super) struct PgCommitter {
    options: PgConnectOptions,
    /// `None` after a failure until the next commit connects again.
    conn: Option<PgConnection>,
    node: Node,
}

impl PgCommitter {
    /// The writer's connection, connecting if there is none; a new one is
    /// checked to make commits durable. Answers the connection and its
    /// `synchronous_commit` when it is new.
    async fn connection(&mut self) -> Result<(&mut PgConnection, String), StorageError> {
        let (conn, setting) = match self.conn.take() {
            Some(conn) => (conn, String::new()),
            None => {
                let connect = async {
                    let mut conn = PgConnection::connect_with(&self.options).await?;
                    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
                        .fetch_one(&mut conn)
                        .await?;
                    Ok::<_, StorageError>((conn, setting))
                };
                let (conn, setting) =
                    super::bounded(self.node.db_timeout, "connecting", connect).await?;
                if !durable_commits(&setting) {
                    return Err(not_durable(&setting));
                }
                (conn, setting)
            }
        };
        Ok((self.conn.insert(conn), setting))
    }

    /// Opens a transaction on the writer's connection. A connection kept
    /// from an earlier batch may have broken since (a restart, a cut):
    /// nothing of this batch has been sent on it, so it is replaced and
    /// the transaction opened on a new one.
    async fn begin(&mut self) -> Result<(), StorageError> {
        let fresh = self.conn.is_none();
        let conn = self.connection().await?.0;
        let began = sqlx::query("BEGIN").execute(&mut *conn).await;
        match began.map_err(StorageError::from) {
            Err(StorageError::Unavailable(e)) if !fresh => {
                tracing::warn!(error = %e, "the database connection broke since the last batch; reconnecting");
                self.conn = None;
                let conn = self.connection().await?.0;
                sqlx::query("BEGIN").execute(&mut *conn).await?;
                Ok(())
            }
            began => began.map(drop),
        }
    }

    /// One batch in one transaction on the writer's connection.
    async fn write(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
        let node = self.node.id.clone();
        self.begin().await?;
        let conn = self.connection().await?.0;
        let done = match check_fences(conn, batch, &node).await {
            Ok(()) => write_batch(conn, batch).await,
            Err(e) => Err(e),
        };
        let done = match (done, notice_payload(batch)) {
            (Ok(()), Some(payload)) => notify(conn, &payload).await,
            (done, _) => done,
        };
        finish(conn, done).await
    }
}

impl Committer for PgCommitter {
    /// A batch that fails for anything but its own data may have failed
    /// for the connection's sake (a restart, a cut, a blackhole): unless
    /// the connection still answers at once, it is thrown away, and the
    /// next batch connects again. A batch with no answer in time is
    /// abandoned with its connection; whether it went in is unknown, so
    /// none of its writes is acknowledged (a session reloads what is
    /// durable).
    async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
        let limit = self.node.db_timeout;
        let done = super::bounded(limit, "a commit", self.write(batch)).await;
        let Err(e) = &done else { return done };
        if let StorageError::Unavailable(_) = e {
            // Cut off, or no answer: the connection is of no more use
            // (mid-statement, its state is unknown).
            if self.conn.take().is_some() {
                tracing::warn!(error = %e, "the database connection failed; reconnecting");
            }
        } else if e.is_the_stores()
            && let Some(mut conn) = self.conn.take()
        {
            let answers = super::bounded(limit, "a ping", async {
                conn.ping().await.map_err(StorageError::from)
            })
            .await;
            match answers {
                Ok(()) => self.conn = Some(conn),
                Err(e) => tracing::warn!(error = %e, "the database connection broke; reconnecting"),
            }
        }
        done
    }
}

/// The channel journal commits are announced on: one notice per commit
/// that wrote journal rows, sent with the commit (a `NOTIFY` is
/// transactional), naming the sessions written.
const JOURNAL_CHANNEL: &str = "questd_journal";

/// A notice's payload must stay under 8000 bytes; past this one names no
/// session and every listener reads all it tails.
const MAX_NOTICE_BYTES: usize = 7000;

/// Separates session ids in a notice (ids never hold it).
const NOTICE_SEPARATOR: char = ' ';

/// Names every session `batch` appends journal rows to, once each, or
/// `*` when they do not fit in one notice; `None` when it appends none.
fn notice_payload(batch: &[&WriteOp]) -> Option<String> {
    let mut seen = HashSet::new();
    let mut payload = String::new();
    for op in batch {
        if let WriteOp::Row(row, _) = op
            && seen.insert(row.session_id.as_str())
        {
            if !payload.is_empty() {
                payload.push(NOTICE_SEPARATOR);
            }
            payload.push_str(&row.session_id);
            if payload.len() > MAX_NOTICE_BYTES {
                return Some("*".into());
            }
        }
    }
    (!payload.is_empty()).then_some(payload)
}

/// Reads a notice's payload back.
fn read_notice(payload: &str) -> JournalNotice {
    if payload == "*" {
        return JournalNotice::Any;
    }
    JournalNotice::Sessions(
        payload
            .split(NOTICE_SEPARATOR)
            .filter(|id| !id.is_empty())
            .map(SessionId::from)
            .collect(),
    )
}

/// Announces the batch's journal rows to every node, at its commit.
async fn notify(conn: &mut PgConnection, payload: &str) -> Result<(), StorageError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(JOURNAL_CHANNEL)
        .bind(payload)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// This node's ear on journal commits: a connection of its own that
/// listens on [`JOURNAL_CHANNEL`]. Notices sent while it is down are lost;
/// it says so ([`JournalNotice::Any`]) once it is back.
pub struct JournalNotices {
    listener: sqlx::postgres::PgListener,
    pool: PgPool,
    limit: Duration,
}

/// How long the listener hears nothing before it listens again on a new
/// connection: a connection behind a blackhole hears nothing either, and
/// nothing else would tell (tails read every `TAIL_POLL` meanwhile).
const QUIET_LISTEN: Duration = Duration::from_secs(30);

impl JournalNotices {
    pub(super) async fn listen(pool: &PgPool, node: &Node) -> Result<Self, StorageError> {
        let limit = node.db_timeout;
        let listener = super::bounded(limit, "listening", Self::connect(pool, limit)).await?;
        Ok(Self {
            listener,
            pool: pool.clone(),
            limit,
        })
    }

    async fn connect(
        pool: &PgPool,
        limit: Duration,
    ) -> Result<sqlx::postgres::PgListener, StorageError> {
        // Its own pool of one, so the read pool keeps all its connections.
        let own = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(limit)
            .connect_lazy_with((*pool.connect_options()).clone());
        let mut listener = sqlx::postgres::PgListener::connect_with(&own).await?;
        // Reconnecting is this type's to do, bounded, not the listener's
        // own (unbounded) on its next receive.
        listener.eager_reconnect(false);
        listener.listen(JOURNAL_CHANNEL).await?;
        Ok(listener)
    }

    /// The next notice. A connection that broke, or heard nothing for
    /// [`QUIET_LISTEN`], is replaced and answers [`JournalNotice::Any`]
    /// (what was committed meanwhile was not announced here). An error
    /// means the database cannot be reached: listen again later, with a
    /// new [`JournalNotices`].
    pub async fn next(&mut self) -> Result<JournalNotice, StorageError> {
        if let Ok(heard) = tokio::time::timeout(QUIET_LISTEN, self.listener.try_recv()).await
            && let Some(notice) = heard?
        {
            return Ok(read_notice(notice.payload()));
        }
        let fresh = Self::connect(&self.pool, self.limit);
        self.listener = super::bounded(self.limit, "listening again", fresh).await?;
        Ok(JournalNotice::Any)
    }
}

/// The statements of one batch, inside the caller's transaction.
pub(super) async fn write_batch(
    conn: &mut PgConnection,
    batch: &[&WriteOp],
) -> Result<(), StorageError> {
    let mut rows: Vec<&JournalRow> = Vec::new();
    let mut audits: Vec<&AuditRow> = Vec::new();
    for op in batch {
        match op {
            WriteOp::Row(r, _) => {
                // Its timer index changes go in with it (the writer
                // retries a failed batch op by op: never one without the
                // other).
                write_timers(conn, r).await?;
                rows.push(r);
                continue;
            }
            // Audit rows go in together at the end, in order; they
            // touch nothing else, so journal rows keep collecting
            // past them.
            WriteOp::Audit(a) => {
                audits.push(a);
                continue;
            }
            _ => {}
        }
        // Rows before a snapshot or a new session go first, keeping
        // the order.
        insert_rows(conn, &mut rows).await?;
        match op {
            WriteOp::Row(..) | WriteOp::Audit(_) => {}
            WriteOp::Enqueue { chat, .. } => {
                sqlx::query(sql::INSERT_INBOX)
                    .bind(&chat.session_id)
                    .bind(&chat.turn_id)
                    .bind(chat.turn_no as i64)
                    .bind(&chat.request_id)
                    .bind(&chat.text)
                    .bind(chat.after_seq as i64)
                    .bind(chat.created_at)
                    .bind(&chat.seat_id)
                    .execute(&mut *conn)
                    .await?;
            }
            WriteOp::Dequeue {
                session_id,
                turn_id,
                ..
            } => {
                sqlx::query(sql::DELETE_INBOX)
                    .bind(session_id)
                    .bind(turn_id)
                    .execute(&mut *conn)
                    .await?;
            }
            WriteOp::Snapshot {
                session_id,
                snapshot,
                ..
            } => {
                if !snapshot.chunks.is_empty() {
                    let (ids, bodies): (Vec<&str>, Vec<&str>) = snapshot
                        .chunks
                        .iter()
                        .map(|(id, body)| (id.as_str(), body.as_str()))
                        .unzip();
                    sqlx::query(
                        "INSERT INTO snapshot_chunks (session_id, chunk_id, body) \
                         SELECT $1, * FROM UNNEST($2::text[], $3::text[]) \
                         ON CONFLICT (session_id, chunk_id) DO NOTHING",
                    )
                    .bind(session_id)
                    .bind(ids)
                    .bind(bodies)
                    .execute(&mut *conn)
                    .await?;
                }
                let replaced = sqlx::query(sql::UPSERT_SNAPSHOT)
                    .bind(session_id)
                    .bind(snapshot.seq as i64)
                    .bind(&snapshot.state)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                if replaced > 0 {
                    sqlx::query(
                        "DELETE FROM snapshot_chunks WHERE session_id = $1 \
                         AND chunk_id <> ALL($2::text[])",
                    )
                    .bind(session_id)
                    .bind(&snapshot.keep)
                    .execute(&mut *conn)
                    .await?;
                }
            }
            WriteOp::Record(record) => write_record(conn, record).await?,
            WriteOp::CreateSession {
                meta,
                snapshot,
                story,
                ..
            } => {
                sqlx::query(sql::INSERT_SESSION)
                    .bind(&meta.session_id)
                    .bind(&meta.tenant_id)
                    .bind(&meta.campaign_id)
                    .bind(&meta.title)
                    .bind(&meta.stored_player_token)
                    .bind(&meta.stored_spectator_token)
                    .bind(meta.created_at)
                    .bind(meta.visibility.as_str())
                    .bind(meta.anonymous)
                    // The first snapshot row is written as before (below),
                    // naming the start: a node of an older version, in the
                    // cluster during a rolling upgrade, loads the session
                    // from it. SQLite has one node and writes none.
                    .bind(None::<&str>)
                    .execute(&mut *conn)
                    .await?;
                let first = match snapshot {
                    FirstSnapshot::Whole(text) => std::borrow::Cow::Borrowed(text.as_str()),
                    FirstSnapshot::Shared(start) => {
                        sqlx::query(sql::INSERT_SHARED_START)
                            .bind(&start.id)
                            .bind(&start.text)
                            .bind(now_ms())
                            .execute(&mut *conn)
                            .await?;
                        std::borrow::Cow::Owned(formats::shared_start_ref(&start.id))
                    }
                };
                match story {
                    None => {
                        sqlx::query(sql::INSERT_FIRST_SNAPSHOT)
                            .bind(&meta.session_id)
                            .bind(first.as_ref())
                            .bind(now_ms())
                            .execute(&mut *conn)
                            .await?;
                    }
                    Some(story) => {
                        for (timer_id, due_at) in &story.timers {
                            sqlx::query(sql::UPSERT_TIMER)
                                .bind(&meta.session_id)
                                .bind(timer_id)
                                .bind(due_at)
                                .execute(&mut *conn)
                                .await?;
                        }
                        rows.extend(&story.rows);
                        sqlx::query(sql::UPSERT_SNAPSHOT)
                            .bind(&meta.session_id)
                            .bind(story.last_seq() as i64)
                            .bind(first.as_ref())
                            .bind(now_ms())
                            .execute(&mut *conn)
                            .await?;
                    }
                }
            }
        }
    }
    insert_rows(conn, &mut rows).await?;
    insert_audits(conn, &audits).await?;
    Ok(())
}

/// One site or idempotency-key write; sets its outcome.
async fn write_record(conn: &mut PgConnection, record: &QueuedRecord) -> Result<(), StorageError> {
    let outcome: i64 = match &record.write {
        RecordWrite::PutSite(site) => sqlx::query_scalar(sql::PUT_SITE)
            .bind(&site.tenant_id)
            .bind(&site.site_id)
            .bind(&site.campaign_id)
            .bind(&site.title)
            .bind(&site.state)
            .bind(site.created_at)
            .bind(site.updated_at)
            .fetch_optional(&mut *conn)
            .await?
            .unwrap_or(0),
        RecordWrite::UpdateSite {
            tenant_id,
            site_id,
            state,
            expected,
            updated_at,
        } => sqlx::query_scalar(sql::UPDATE_SITE)
            .bind(state)
            .bind(updated_at)
            .bind(tenant_id)
            .bind(site_id)
            .bind(expected)
            .fetch_optional(&mut *conn)
            .await?
            .unwrap_or(0),
        RecordWrite::ClaimKey {
            tenant_id,
            key,
            tool,
            request_hash,
            created_at,
            forget_before,
        } => {
            sqlx::query(sql::FORGET_KEYS)
                .bind(forget_before)
                .execute(&mut *conn)
                .await?;
            sqlx::query(sql::CLAIM_KEY)
                .bind(tenant_id)
                .bind(key)
                .bind(tool)
                .bind(request_hash)
                .bind(created_at)
                .execute(&mut *conn)
                .await?
                .rows_affected() as i64
        }
        RecordWrite::FinishKey {
            tenant_id,
            key,
            status,
            response,
        } => sqlx::query(sql::FINISH_KEY)
            .bind(i64::from(*status))
            .bind(response)
            .bind(tenant_id)
            .bind(key)
            .execute(&mut *conn)
            .await?
            .rows_affected() as i64,
        RecordWrite::DropKey { tenant_id, key } => sqlx::query(sql::DROP_KEY)
            .bind(tenant_id)
            .bind(key)
            .execute(&mut *conn)
            .await?
            .rows_affected() as i64,
        RecordWrite::AddSpend {
            day,
            scope,
            key,
            tokens,
            forget_before_day,
        } => {
            if let Some(before) = forget_before_day {
                sqlx::query(sql::FORGET_SPEND)
                    .bind(before)
                    .execute(&mut *conn)
                    .await?;
            }
            sqlx::query(sql::ADD_SPEND)
                .bind(day)
                .bind(*scope)
                .bind(key)
                .bind(tokens)
                .execute(&mut *conn)
                .await?
                .rows_affected() as i64
        }
        RecordWrite::CloseSession {
            session_id,
            closed_at,
        } => sqlx::query(sql::CLOSE_SESSION)
            .bind(closed_at)
            .bind(session_id)
            .execute(&mut *conn)
            .await?
            .rows_affected() as i64,
        RecordWrite::DeleteSession { session_id, claim } => {
            delete_session(conn, session_id, claim.as_ref()).await?
        }
    };
    record.took(outcome);
    Ok(())
}

/// Deletes a session and what is stored of it while `claim` (node, epoch)
/// is still its owner's claim; answers the sessions deleted (0 or 1).
async fn delete_session(
    conn: &mut PgConnection,
    session_id: &SessionId,
    claim: Option<&(NodeId, i64)>,
) -> Result<i64, StorageError> {
    let Some((node, epoch)) = claim else {
        // Every node claims before it deletes.
        return Ok(0);
    };
    let held: Option<i64> = sqlx::query_scalar(
        "SELECT epoch FROM session_owners WHERE session_id = $1 AND node_id = $2 AND epoch = $3",
    )
    .bind(session_id)
    .bind(node)
    .bind(epoch)
    .fetch_optional(&mut *conn)
    .await?;
    if held.is_none() {
        return Ok(0);
    }
    let mut deleted = 0;
    for statement in sql::DELETE_SESSION {
        deleted = sqlx::query(statement)
            .bind(session_id)
            .execute(&mut *conn)
            .await?
            .rows_affected() as i64;
    }
    sqlx::query("DELETE FROM session_owners WHERE session_id = $1")
        .bind(session_id)
        .execute(&mut *conn)
        .await?;
    Ok(deleted)
}

/// The timer index changes of journal row `row`.
async fn write_timers(conn: &mut PgConnection, row: &JournalRow) -> Result<(), StorageError> {
    for t in &row.timers {
        let (statement, timer_id, due_at) = match t {
            TimerIndex::Due { timer_id, due_at } => (sql::UPSERT_TIMER, timer_id, Some(*due_at)),
            TimerIndex::DueUnlessSet { timer_id, due_at } => {
                (sql::INSERT_TIMER_UNLESS_SET, timer_id, Some(*due_at))
            }
            TimerIndex::Gone { timer_id } => (sql::DELETE_TIMER, timer_id, None),
        };
        let query = sqlx::query(statement).bind(&row.session_id).bind(timer_id);
        match due_at {
            Some(at) => query.bind(at),
            None => query,
        }
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The condition that no live node claims the session of the row `alias`
/// (built only from constants).
fn unclaimed(alias: &str) -> String {
    format!(
        "AND NOT EXISTS (SELECT 1 FROM session_owners o WHERE o.session_id = {alias}.session_id \
         AND o.lease_until > clock_timestamp())"
    )
}

/// See [`super::Store::due_timers`]: sessions no live node holds.
pub(super) async fn due_timers(
    pool: &PgPool,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<(SessionId, i64)>, StorageError> {
    let query = sql::due_timers(&unclaimed("t"));
    // Built only from constants.
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// See [`super::Store::waiting_chats`]: sessions no live node holds.
pub(super) async fn waiting_chats(
    pool: &PgPool,
    limit: u32,
) -> Result<Vec<(SessionId, i64)>, StorageError> {
    let query = sql::waiting_chats(&unclaimed("i"));
    // Built only from constants.
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// See [`super::Store::abandoned_sessions`].
pub(super) async fn abandoned_sessions(
    pool: &PgPool,
    before_ms: i64,
    limit: u32,
) -> Result<Vec<SessionId>, StorageError> {
    let query = sql::abandoned_sessions("s.anonymous", &unclaimed("s"));
    // Built only from constants.
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(query))
        .bind(before_ms)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// Ends the transaction a batch ran in: `COMMIT` if `done` is
/// fine, else `ROLLBACK`, and answers whether the batch is durable.
///
/// The transaction is spelled out (`BEGIN` … `COMMIT`, `ROLLBACK` on
/// any error) instead of going through sqlx's transaction guard.
/// SQLite rolls a transaction back by itself on some errors (a full
/// disk, an I/O error, a trigger's `RAISE(ROLLBACK)`); the guard's
/// own `ROLLBACK` then fails, it keeps counting a transaction that no
/// longer exists, and turns every later `BEGIN`/`COMMIT` into a
/// savepoint and its release: commits that report success and write
/// nothing. Here no state survives a failed batch: the `ROLLBACK` is
/// issued whether or not the database already rolled back, and its
/// own failure ("no transaction is active") is expected.
pub(super) async fn finish(
    conn: &mut PgConnection,
    done: Result<(), StorageError>,
) -> Result<(), StorageError> {
    let done = match done {
        Ok(()) => sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(drop)
            .map_err(StorageError::from),
        Err(e) => Err(e),
    };
    if done.is_err()
        && let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await
    {
        tracing::debug!(error = %e, "rollback after a failed batch (it may have rolled back already)");
    }
    done
}

/// Inserts `rows` as journal steps (`steps.rs`) and clears them: the
/// whole batch in one statement of one array per column. A multi-row
/// `VALUES` list with a parameter per value costs PostgreSQL a fresh plan
/// for every batch size (tens of ms for a few hundred rows); this
/// statement's text never changes, so it is prepared once.
async fn insert_rows(
    conn: &mut PgConnection,
    rows: &mut Vec<&JournalRow>,
) -> Result<(), StorageError> {
    if rows.is_empty() {
        return Ok(());
    }
    let steps = steps::group(rows);
    let text = |f: for<'s> fn(&'s steps::Step<'s>) -> Option<&'s str>| -> Vec<Option<&str>> {
        steps.iter().map(|s| f(s)).collect()
    };
    let number = |f: fn(&steps::Step<'_>) -> i64| -> Vec<i64> { steps.iter().map(f).collect() };
    sqlx::query(
        "INSERT INTO journal (session_id, seq, last_seq, turn_id, started, request_id, ended, \
         actions, body, created_at) SELECT * FROM unnest($1::text[], $2::bigint[], \
         $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::bigint[], \
         $9::text[], $10::bigint[])",
    )
    .bind(text(|s| Some(s.session_id)))
    .bind(number(|s| s.seq))
    .bind(number(|s| s.last_seq))
    .bind(text(|s| s.turn_id))
    .bind(number(|s| s.started))
    .bind(text(|s| s.request_id))
    .bind(text(|s| s.ended))
    .bind(number(|s| s.actions))
    .bind(text(|s| Some(s.body.as_str())))
    .bind(number(|s| s.created_at))
    .execute(&mut *conn)
    .await?;
    rows.clear();
    Ok(())
}

/// Inserts audit rows, the whole batch in one statement (see
/// [`insert_rows`]).
async fn insert_audits(conn: &mut PgConnection, audits: &[&AuditRow]) -> Result<(), StorageError> {
    if audits.is_empty() {
        return Ok(());
    }
    let text = |f: fn(&AuditRow) -> Option<&str>| -> Vec<Option<&str>> {
        audits.iter().map(|a| f(a)).collect()
    };
    let number = |f: fn(&AuditRow) -> i64| -> Vec<i64> { audits.iter().map(|a| f(a)).collect() };
    sqlx::query(
        "INSERT INTO audit (session_id, tenant_id, trace_id, turn_id, call_id, tool, role, \
         args_hash, status, reason, error_code, error_message, duration_us, prompt_tokens, \
         completion_tokens, created_at, site_id, span_id, user_id) SELECT * FROM unnest(\
         $1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
         $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[], \
         $14::bigint[], $15::bigint[], $16::bigint[], $17::text[], $18::text[], $19::text[])",
    )
    .bind(text(|a| a.session_id.as_deref()))
    .bind(text(|a| Some(a.tenant_id.as_str())))
    .bind(text(|a| Some(a.trace_id.as_str())))
    .bind(text(|a| a.turn_id.as_deref()))
    .bind(text(|a| a.call_id.as_deref()))
    .bind(text(|a| Some(a.tool.as_str())))
    .bind(text(|a| Some(a.role.as_str())))
    .bind(text(|a| Some(a.args_hash.as_str())))
    .bind(text(|a| Some(a.status.as_str())))
    .bind(text(|a| a.reason.as_deref()))
    .bind(text(|a| a.error_code.as_deref()))
    .bind(text(|a| a.error_message.as_deref()))
    .bind(number(|a| a.duration_us))
    .bind(number(|a| a.prompt_tokens))
    .bind(number(|a| a.completion_tokens))
    .bind(number(|a| a.created_at))
    .bind(text(|a| a.site_id.as_deref()))
    .bind(text(|a| a.span_id.as_deref()))
    .bind(text(|a| a.user_id.as_deref()))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The epoch every session write of `batch` was made under, by session.
fn fences<'a>(batch: &[&'a WriteOp]) -> Result<HashMap<&'a str, i64>, StorageError> {
    let mut fences = HashMap::new();
    for op in batch {
        let (session_id, epoch) = match op {
            WriteOp::Row(row, sink) => (row.session_id.as_str(), sink.epoch()),
            WriteOp::Snapshot {
                session_id, epoch, ..
            }
            | WriteOp::Dequeue {
                session_id, epoch, ..
            } => (session_id.as_str(), *epoch),
            WriteOp::Enqueue { chat, epoch, .. } => (chat.session_id.as_str(), *epoch),
            WriteOp::Audit(_) | WriteOp::CreateSession { .. } | WriteOp::Record(_) => continue,
        };
        // Every session write on a shared database is made under a claim.
        let Epoch::Claimed(n) = epoch else {
            return Err(StorageError::Fenced);
        };
        if *fences.entry(session_id).or_insert(n) != n {
            return Err(StorageError::Fenced);
        }
    }
    Ok(fences)
}

/// Fails the batch unless this node still holds, at the epoch they were
/// written under, every session it writes. A node that was paused or cut
/// off past its lease finds the epoch moved and writes nothing; the writer
/// retries a failed batch op by op, so only the fenced sessions' writes
/// fail.
///
/// The claims are read without a lock: a lock would queue every batch
/// behind the renewals (and them behind it). A claim committed in the
/// moment between this read and the commit cannot make two histories
/// either: the journal's key is (session, seq), so whichever node writes a
/// seq second fails its batch and stops the session, and a session sends
/// nothing before its rows are committed.
async fn check_fences(
    conn: &mut PgConnection,
    batch: &[&WriteOp],
    node: &str,
) -> Result<(), StorageError> {
    let fences = fences(batch)?;
    if fences.is_empty() {
        return Ok(());
    }
    let (ids, epochs): (Vec<&str>, Vec<i64>) = fences.into_iter().unzip();
    let held: Vec<(String,)> = sqlx::query_as(
        "SELECT o.session_id FROM session_owners o \
         JOIN unnest($1::text[], $2::bigint[]) AS w (session_id, epoch) \
         ON o.session_id = w.session_id AND o.epoch = w.epoch \
         WHERE o.node_id = $3",
    )
    .bind(&ids)
    .bind(&epochs)
    .bind(node)
    .fetch_all(&mut *conn)
    .await?;
    if held.len() == ids.len() {
        Ok(())
    } else {
        Err(StorageError::Fenced)
    }
}

/// See [`super::Store::claim`]: taking a session from another node (whose
/// lease ran out) bumps the epoch, which fences that node's writes; the
/// owner claiming again keeps its epoch and renews the lease, so two loads
/// of one session racing on one node do not fence each other. Another
/// node's live claim answers `None`.
pub(super) async fn claim(
    pool: &PgPool,
    session_id: &SessionId,
    node: &Node,
) -> Result<Option<(i64, bool)>, StorageError> {
    // `prev` reads the claim as it was before this statement: whether this
    // claim takes the session from another node.
    Ok(sqlx::query_as(
        "WITH prev AS (SELECT node_id FROM session_owners WHERE session_id = $1) \
         INSERT INTO session_owners (session_id, node_id, epoch, lease_until) \
         VALUES ($1, $2, 1, clock_timestamp() + $3 * interval '1 millisecond') \
         ON CONFLICT (session_id) DO UPDATE SET node_id = excluded.node_id, \
         epoch = CASE WHEN session_owners.node_id = excluded.node_id THEN session_owners.epoch \
         ELSE session_owners.epoch + 1 END, lease_until = excluded.lease_until \
         WHERE session_owners.lease_until < clock_timestamp() OR session_owners.node_id = $2 \
         RETURNING epoch, COALESCE((SELECT node_id FROM prev) <> $2, false)",
    )
    .bind(session_id)
    .bind(&node.id)
    .bind(lease_ms(node))
    .fetch_optional(pool)
    .await?)
}

/// See [`super::Store::renew`]: one statement for all of a node's claims.
pub(super) async fn renew(
    pool: &PgPool,
    sessions: &[(SessionId, Epoch)],
    node: &Node,
) -> Result<Vec<SessionId>, StorageError> {
    let claimed: Vec<(&SessionId, i64)> = sessions
        .iter()
        .filter_map(|(id, epoch)| match epoch {
            Epoch::Claimed(n) => Some((id, *n)),
            Epoch::Sole => None,
        })
        .collect();
    if claimed.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, epochs): (Vec<&str>, Vec<i64>) =
        claimed.iter().map(|(id, n)| (id.as_str(), *n)).unzip();
    let kept: Vec<(String,)> = sqlx::query_as(
        "UPDATE session_owners o SET lease_until = clock_timestamp() + $4 * interval '1 millisecond' \
         FROM unnest($1::text[], $2::bigint[]) AS w (session_id, epoch) \
         WHERE o.session_id = w.session_id AND o.epoch = w.epoch AND o.node_id = $3 \
         RETURNING o.session_id",
    )
    .bind(&ids)
    .bind(&epochs)
    .bind(&node.id)
    .bind(lease_ms(node))
    .fetch_all(pool)
    .await?;
    let kept: HashSet<String> = kept.into_iter().map(|(id,)| id).collect();
    Ok(claimed
        .into_iter()
        .filter(|(id, _)| !kept.contains(id.as_str()))
        .map(|(id, _)| id.clone())
        .collect())
}

/// See [`super::Store::release`].
pub(super) async fn release(
    pool: &PgPool,
    session_id: &SessionId,
    epoch: i64,
    node: &Node,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE session_owners SET lease_until = clock_timestamp() \
         WHERE session_id = $1 AND epoch = $2 AND node_id = $3",
    )
    .bind(session_id)
    .bind(epoch)
    .bind(&node.id)
    .execute(pool)
    .await?;
    Ok(())
}

/// See [`super::Store::owner`].
pub(super) async fn owner(
    pool: &PgPool,
    session_id: &SessionId,
) -> Result<Option<NodeId>, StorageError> {
    Ok(sqlx::query_scalar(
        "SELECT node_id FROM session_owners WHERE session_id = $1 \
         AND lease_until > clock_timestamp()",
    )
    .bind(session_id)
    .fetch_optional(pool)
    .await?)
}

/// See [`super::Store::announce`].
pub(super) async fn announce(pool: &PgPool, node: &Node, url: &str) -> Result<(), StorageError> {
    sqlx::query(
        "INSERT INTO nodes (node_id, url, announced_at) VALUES ($1, $2, clock_timestamp()) \
         ON CONFLICT (node_id) DO UPDATE SET url = excluded.url, announced_at = excluded.announced_at",
    )
    .bind(&node.id)
    .bind(url)
    .execute(pool)
    .await?;
    Ok(())
}

/// See [`super::Store::owner_address`].
pub(super) async fn owner_address(
    pool: &PgPool,
    session_id: &SessionId,
) -> Result<Option<(NodeId, String)>, StorageError> {
    Ok(sqlx::query_as(
        "SELECT o.node_id, n.url FROM session_owners o JOIN nodes n ON n.node_id = o.node_id \
         WHERE o.session_id = $1 AND o.lease_until > clock_timestamp()",
    )
    .bind(session_id)
    .fetch_optional(pool)
    .await?)
}

/// See [`super::Store::cluster_secret`].
pub(super) async fn cluster_secret(pool: &PgPool, fresh: &str) -> Result<String, StorageError> {
    sqlx::query(
        "INSERT INTO cluster_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
    )
    .bind(fresh)
    .execute(pool)
    .await?;
    Ok(
        sqlx::query_scalar("SELECT secret FROM cluster_secret WHERE id = 1")
            .fetch_one(pool)
            .await?,
    )
}

fn lease_ms(node: &Node) -> i64 {
    i64::try_from(node.lease.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{DurableSink, JournalRow};

    fn row(session_id: &str, seq: u64) -> WriteOp {
        WriteOp::Row(
            JournalRow {
                session_id: session_id.into(),
                seq,
                turn_id: None,
                kind: "presence",
                request_id: None,
                frame: "{}".into(),
                effect: None,
                history: None,
                action: None,
                created_at: 0,
                timers: Vec::new(),
            },
            DurableSink::new(Epoch::Claimed(1), |_| {}),
        )
    }

    #[test]
    fn only_synchronous_commit_off_is_refused() {
        for (setting, durable) in [
            ("on", true),
            ("local", true),
            ("remote_write", true),
            ("remote_apply", true),
            ("off", false),
            ("OFF", false),
        ] {
            assert_eq!(durable_commits(setting), durable, "{setting}");
        }
    }

    #[test]
    fn a_commit_notice_names_each_session_written_once_or_all_of_them() {
        let ops = [row("sess_a", 1), row("sess_b", 7), row("sess_a", 2)];
        let batch: Vec<&WriteOp> = ops.iter().collect();
        let payload = notice_payload(&batch).unwrap();
        assert_eq!(payload, "sess_a sess_b");
        assert_eq!(
            read_notice(&payload),
            JournalNotice::Sessions(vec!["sess_a".into(), "sess_b".into()])
        );
        // No journal row, no notice.
        assert_eq!(notice_payload(&[]), None);
        // Too many sessions for one notice: every listener reads them all.
        let many: Vec<WriteOp> = (0..1000).map(|n| row(&format!("sess_{n:08}"), 1)).collect();
        let batch: Vec<&WriteOp> = many.iter().collect();
        let payload = notice_payload(&batch).unwrap();
        assert!(payload.len() < 8000);
        assert_eq!(read_notice(&payload), JournalNotice::Any);
    }
}
