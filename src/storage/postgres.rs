//! PostgreSQL storage, for deployments of several nodes on one database
//! (`QUESTD_DATABASE_URL=postgres://…`). A pool for reads and one writer
//! connection for the group commits, as on SQLite; a commit is durable
//! when PostgreSQL acknowledges it (`synchronous_commit` is on by default).

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

use super::sql::queries;
use super::writer::Committer;

queries!(sqlx::Postgres);

/// Read connections of the pool at most.
const READ_CONNECTIONS: u32 = 8;

/// How long connecting may take before it counts as a failure.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the database at `url` and runs its migrations: the read pool
/// and the writer.
pub(super) async fn open(url: &str) -> Result<(PgPool, PgCommitter), StorageError> {
    let options = PgConnectOptions::from_str(url)?;
    let pool = PgPoolOptions::new()
        .max_connections(READ_CONNECTIONS)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options.clone())
        .await?;
    sqlx::migrate!("migrations/postgres").run(&pool).await?;
    let conn = PgConnection::connect_with(&options).await?;
    Ok((
        pool,
        PgCommitter {
            options,
            conn: Some(conn),
        },
    ))
}

/// The writer's connection, opened again when it breaks (a database
/// restart or failover, a network cut): the writer outlives its connection.
pub(super) struct PgCommitter {
    options: PgConnectOptions,
    /// `None` after a failure until the next commit connects again.
    conn: Option<PgConnection>,
}

impl PgCommitter {
    async fn connection(&mut self) -> Result<&mut PgConnection, StorageError> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&self.options))
                    .await
                    .map_err(|_| StorageError::Database("connecting timed out".into()))??
            }
        };
        Ok(self.conn.insert(conn))
    }
}

impl Committer for PgCommitter {
    async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
        let conn = self.connection().await?;
        let done = commit_with(conn, "BEGIN", batch).await;
        // A failed batch may have been the connection's fault: if it no
        // longer answers, the next batch connects again.
        if done.is_err()
            && let Some(mut conn) = self.conn.take()
        {
            if conn.ping().await.is_ok() {
                self.conn = Some(conn);
            } else {
                tracing::warn!("the database connection broke; reconnecting");
            }
        }
        done
    }
}
