//! The database a test server runs on: a fresh SQLite file in the test's
//! temp dir, or, with `QUESTD_TEST_DATABASE=postgres`, a fresh PostgreSQL
//! database per test dir on the server `QUESTD_TEST_POSTGRES_URL` names
//! (`postgres://user:pass@host:port/db`, a role that may create databases).
//! The tests of several nodes (`cluster.rs`) always need that server.
//! `scripts/test` starts PostgreSQL and runs the suite both ways. Without a
//! server there, the tests that need one fail.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::{Connection, PgConnection};

/// The variable naming the PostgreSQL server tests may use.
pub const POSTGRES_ENV: &str = "QUESTD_TEST_POSTGRES_URL";
/// The variable that runs the whole suite on PostgreSQL (`postgres`).
pub const DATABASE_ENV: &str = "QUESTD_TEST_DATABASE";

/// Prefix of every database the tests create; the pid of the test process
/// follows, so leftovers of finished runs can be told from live ones.
const PREFIX: &str = "questd_test_";

/// The PostgreSQL server tests use; fails the test when none is named.
pub fn postgres_admin_url() -> String {
    std::env::var(POSTGRES_ENV)
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "this test needs PostgreSQL: set {POSTGRES_ENV} (scripts/test starts a server and sets it)"
            )
        })
}

/// Whether the suite runs on PostgreSQL.
fn suite_on_postgres() -> bool {
    std::env::var(DATABASE_ENV).is_ok_and(|v| v == "postgres")
}

/// The database URL for a server whose data lives in `dir`: the same URL
/// each time for one dir, so a restarted server finds its data.
pub fn database_url_in(dir: &Path) -> String {
    if suite_on_postgres() {
        postgres_url_in(dir)
    } else {
        sqlite_url_in(dir)
    }
}

/// A PostgreSQL database for the data in `dir`, made on first use.
pub fn postgres_url_in(dir: &Path) -> String {
    let remembered = dir.join("postgres-url");
    if let Ok(url) = std::fs::read_to_string(&remembered) {
        return url;
    }
    let url = blocking(create_database(postgres_admin_url()));
    std::fs::write(&remembered, &url).expect("remember the test database");
    url
}

/// An SQLite database in `dir`, for tests of what only SQLite has (a
/// file's size cap, a file system).
pub fn sqlite_url_in(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("questd.db").display())
}

/// Runs `f` to completion on a runtime of its own (callers may be inside
/// one, or not).
fn blocking<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    })
    .join()
    .expect("database setup")
}

/// Creates a fresh database and answers its URL. The first call of a run
/// also drops the databases of earlier runs whose process has ended.
async fn create_database(admin: String) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static SWEPT: AtomicBool = AtomicBool::new(false);
    let mut c = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
        panic!("{POSTGRES_ENV} is set but PostgreSQL does not answer there: {e}")
    });
    if !SWEPT.swap(true, Ordering::Relaxed) {
        drop_finished_runs(&mut c).await;
    }
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("{PREFIX}{}_{n}", std::process::id());
    // Built only from the pid and a counter.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut c)
        .await
        .expect("create the test database");
    with_database(&admin, &name)
}

/// `url` with its database name replaced by `name`, its parameters kept.
fn with_database(url: &str, name: &str) -> String {
    let (address, params) = url.split_once('?').unwrap_or((url, ""));
    let (server, _) = address
        .rsplit_once('/')
        .filter(|(server, _)| server.contains("://"))
        .unwrap_or((address, ""));
    if params.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{params}")
    }
}

/// Drops test databases left by runs whose process is gone.
async fn drop_finished_runs(c: &mut PgConnection) {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'questd_test_%'")
            .fetch_all(&mut *c)
            .await
            .expect("list test databases");
    for name in names {
        let pid = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('_').next())
            .unwrap_or("");
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Built from a name PostgreSQL listed, matching the prefix.
        let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *c).await;
    }
}

/// The rows `sql` answers on the database `url` names (SQLite or
/// PostgreSQL), with `$1` bound to `param`; every column must be text.
pub async fn text_rows(url: &str, sql: &str, param: &str) -> Vec<Vec<String>> {
    use sqlx::{Row, SqliteConnection};
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    fn texts<R: Row>(r: &R) -> Vec<String>
    where
        usize: sqlx::ColumnIndex<R>,
        for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    {
        (0..r.len())
            .map(|i| r.try_get::<String, _>(i).expect("a text column"))
            .collect()
    }
    if url.starts_with("postgres") {
        let mut c = PgConnection::connect(url).await.expect("connects");
        let rows = sqlx::query(sql).bind(param).fetch_all(&mut c).await;
        rows.expect("query runs").iter().map(texts).collect()
    } else {
        let mut c = SqliteConnection::connect(url).await.expect("connects");
        let rows = sqlx::query(sql).bind(param).fetch_all(&mut c).await;
        rows.expect("query runs").iter().map(texts).collect()
    }
}

/// Runs the statement `sql` on the database `url` names (SQLite or
/// PostgreSQL), with `$1` bound to `param`; answers the rows it changed.
pub async fn execute(url: &str, sql: &str, param: &str) -> u64 {
    use sqlx::SqliteConnection;
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    if url.starts_with("postgres") {
        let mut c = PgConnection::connect(url).await.expect("connects");
        let done = sqlx::query(sql).bind(param).execute(&mut c).await;
        done.expect("statement runs").rows_affected()
    } else {
        let mut c = SqliteConnection::connect(url).await.expect("connects");
        let done = sqlx::query(sql).bind(param).execute(&mut c).await;
        done.expect("statement runs").rows_affected()
    }
}
