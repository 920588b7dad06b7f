//! The group-commit writer, the same for every database: one task takes
//! whatever writes have queued up, from all sessions, and commits them in one
//! transaction through a [`Committer`] (the dialect's SQL), then tells each
//! waiter. Durability costs one commit per batch, not one per action.
//!
//! On SQLite, while more than one session is writing, the writer waits
//! [`GATHER`](super::ops::GATHER) before each commit for more writes to join the batch
//! (PostgreSQL's `commit_delay` with `commit_siblings`, MySQL's
//! `binlog_group_commit_sync_delay`): the commit's fixed costs (the
//! `fsync`, the transaction, a session index's page that several turns
//! share) are then paid by more turns. A session writing alone never
//! waits. A PostgreSQL writer does not wait: its commits' costs are
//! mostly the server's, which groups commits itself (`commit_delay`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::{mpsc, oneshot};

use crate::ids::{SessionId, TurnId};
use crate::metrics::Metrics;

use super::ops::{Committer, QueuedRecord, WriteOp};
use super::{
    AuditRow, BUSY_QUEUED_WRITES, DurableSink, Epoch, FirstSnapshot, ImportedStory, JournalRow,
    MAX_BATCH, MAX_QUEUED_WRITES, QueuedChat, STORAGE_BEHIND, STORAGE_FAILING, SessionMeta,
    SessionWrite, SnapshotWrite, StorageError, now_ms,
};

/// How long after a failed write new work is refused (`STORAGE_FAILING`);
/// after it, the next write tries the store again. Only the store's own
/// failures start it ([`store_failing`]): a write refused for its data
/// fails alone.
const FAILURE_HOLD_MS: i64 = 2_000;

/// A batch that took this long to fail with the database unavailable
/// (no answer in time: a blackhole, a partition) says the next would wait
/// as long: until the hold ends, batches fail at once instead, so a
/// session waits for one such failure, not for one per batch queued
/// behind it.
const SLOW_FAILURE: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes of a failed batch that may fail one after another, when retried
/// one by one, before the rest of the batch is failed without a try. A
/// write refused for its own data does not count: the store answered.
const RETRY_GIVE_UP: usize = 3;

/// What goes through the writer's queue: one write, or the writes of one
/// session's step, which go into the same batch. A slot is a write's size
/// either way, as it was when the queue held writes alone.
#[allow(clippy::large_enum_variant)]
pub(super) enum Queued {
    One(WriteOp),
    Many(Vec<WriteOp>),
    /// Hears once every write queued before it has been committed (or has
    /// failed): nothing queued before it is still on its way.
    Settled(oneshot::Sender<()>),
}

/// The queue into the writer task, and what it says about storage's health.
///
/// The writer task runs until every clone is dropped.
#[derive(Clone)]
pub(super) struct Writes {
    /// Bounded at [`MAX_QUEUED_WRITES`]: a full queue refuses writes.
    tx: mpsc::Sender<Queued>,
    /// Until when (ms since the epoch) new work is refused because a write
    /// failed; set by the writer.
    failing_until: Arc<AtomicI64>,
}

impl Writes {
    /// Starts the writer: a task on the current arbiter, or a thread of
    /// its own for a committer that blocks ([`Committer::own_thread`]).
    pub(super) fn start<C: Committer>(committer: C, metrics: Arc<Metrics>) -> Self {
        let gather = match C::gather() {
            Some(d) if C::own_thread() => Gather::Block(d),
            _ => Gather::Never,
        };
        Self::start_with(committer, metrics, gather)
    }

    /// [`Writes::start`], gathering writes as `gather` says.
    fn start_with<C: Committer>(committer: C, metrics: Arc<Metrics>, gather: Gather) -> Self {
        let (tx, rx) = mpsc::channel(MAX_QUEUED_WRITES);
        let failing_until = Arc::new(AtomicI64::new(0));
        let failing = failing_until.clone();
        if C::own_thread() {
            let thread = std::thread::Builder::new()
                .name("questd-writer".into())
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => {
                            runtime.block_on(writer(committer, rx, metrics, failing, gather))
                        }
                        Err(e) => tracing::error!(error = %e, "the writer's runtime did not start"),
                    }
                });
            if let Err(e) = thread {
                // The queue's receiver is gone with it: every write fails
                // as the writer being gone.
                tracing::error!(error = %e, "the writer's thread did not start");
            }
        } else {
            actix::spawn(writer(committer, rx, metrics, failing, gather));
        }
        Self { tx, failing_until }
    }

    /// Queues one write, or answers why it could not, with the write back.
    fn send(&self, op: WriteOp) -> Result<(), (StorageError, Option<Box<WriteOp>>)> {
        self.tx.try_send(Queued::One(op)).map_err(|e| {
            let error = refused(&e);
            let op = match e.into_inner() {
                Queued::One(op) => Some(op),
                Queued::Many(ops) => ops.into_iter().next(),
                Queued::Settled(_) => None,
            };
            (error, op.map(Box::new))
        })
    }

    /// Queues one session's journal and audit rows, in order, to go into
    /// the same batch; `sink` hears when the rows are durable.
    pub(super) fn write_all(&self, writes: Vec<SessionWrite>, sink: &DurableSink) {
        if writes.is_empty() {
            return;
        }
        let ops = writes
            .into_iter()
            .map(|w| match w {
                SessionWrite::Row(row) => WriteOp::Row(row, sink.clone()),
                SessionWrite::Audit(row) => WriteOp::Audit(row),
            })
            .collect();
        if let Err(e) = self.tx.try_send(Queued::Many(ops)) {
            let error = refused(&e);
            if let Queued::Many(ops) = e.into_inner() {
                if ops.iter().any(|op| matches!(op, WriteOp::Audit(_))) {
                    tracing::error!(%error, "audit row dropped");
                }
                if ops.iter().any(|op| matches!(op, WriteOp::Row(..))) {
                    sink.notify(Err(error));
                }
            }
        }
    }

    /// Queues a journal row; `sink` hears when it (and everything before it)
    /// is durable.
    pub(super) fn append(&self, row: JournalRow, sink: DurableSink) {
        if let Err(e) = self.send(WriteOp::Row(row, sink)) {
            let (gone, op) = e;
            if let Some(WriteOp::Row(_, sink)) = op.map(|op| *op) {
                sink.notify(Err(gone));
            }
        }
    }

    /// See [`super::Store::refusing`].
    pub(super) fn refusing(&self) -> Option<&'static str> {
        if MAX_QUEUED_WRITES - self.tx.capacity() >= BUSY_QUEUED_WRITES {
            Some(STORAGE_BEHIND)
        } else if now_ms() < self.failing_until.load(Ordering::Acquire) {
            Some(STORAGE_FAILING)
        } else {
            None
        }
    }

    /// Queues a snapshot; if `done` is given it hears when it is durable.
    pub(super) fn snapshot(
        &self,
        session_id: &SessionId,
        epoch: Epoch,
        snapshot: SnapshotWrite,
        done: Option<oneshot::Sender<Result<(), StorageError>>>,
    ) {
        let op = WriteOp::Snapshot {
            session_id: session_id.clone(),
            epoch,
            snapshot,
            done,
        };
        if let Err(e) = self.send(op) {
            let (error, op) = e;
            if let Some(WriteOp::Snapshot {
                done: Some(done), ..
            }) = op.map(|op| *op)
            {
                let _ = done.send(Err(error));
            }
        }
    }

    /// See [`super::Store::enqueue`].
    pub(super) fn enqueue(
        &self,
        chat: QueuedChat,
        epoch: Epoch,
        done: oneshot::Sender<Result<(), StorageError>>,
    ) {
        if let Err(e) = self.send(WriteOp::Enqueue { chat, epoch, done }) {
            let (error, op) = e;
            if let Some(WriteOp::Enqueue { done, .. }) = op.map(|op| *op) {
                let _ = done.send(Err(error));
            }
        }
    }

    /// See [`super::Store::dequeue`].
    pub(super) fn dequeue(&self, session_id: &SessionId, turn_id: &TurnId, epoch: Epoch) {
        let op = WriteOp::Dequeue {
            session_id: session_id.clone(),
            turn_id: turn_id.clone(),
            epoch,
        };
        if let Err(e) = self.send(op) {
            // The row stays; a reload skips it, its turn having started.
            let (error, _) = e;
            tracing::warn!(%error, "a started chat stays in the inbox");
        }
    }

    /// Queues an audit row; nobody waits for it.
    pub(super) fn audit(&self, row: AuditRow) {
        if let Err(e) = self.send(WriteOp::Audit(row)) {
            let (error, _) = e;
            tracing::error!(%error, "audit row dropped");
        }
    }

    /// Queues a record write; its `done` hears when it is durable.
    pub(super) fn record(&self, record: QueuedRecord) -> Result<(), StorageError> {
        self.send(WriteOp::Record(record)).map_err(|e| e.0)
    }

    /// Returns once every write queued before the call has been committed
    /// or has failed (at once if the writer is gone).
    pub(super) async fn settled(&self) {
        let (done, rx) = oneshot::channel();
        if self.tx.send(Queued::Settled(done)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Stores a new session and its opening snapshot (with an imported
    /// save's story, if any); returns once durable.
    pub(super) async fn create_session(
        &self,
        meta: SessionMeta,
        snapshot: FirstSnapshot,
        story: Option<Box<ImportedStory>>,
    ) -> Result<(), StorageError> {
        let (done, rx) = oneshot::channel();
        self.send(WriteOp::CreateSession {
            meta,
            snapshot,
            story,
            done,
        })
        .map_err(|e| e.0)?;
        rx.await.map_err(|_| StorageError::WriterGone)?
    }
}

/// Why writes could not be queued.
fn refused<T>(e: &mpsc::error::TrySendError<T>) -> StorageError {
    match e {
        mpsc::error::TrySendError::Full(_) => StorageError::Overloaded,
        mpsc::error::TrySendError::Closed(_) => StorageError::WriterGone,
    }
}

/// Whether and how the writer waits for more writes to join a batch.
enum Gather {
    /// It commits what it has at once.
    Never,
    /// It blocks its thread (a writer on a thread of its own, which
    /// nothing else runs on): exact to a few microseconds, where a
    /// runtime's timer rounds up to the millisecond.
    Block(std::time::Duration),
    /// It runs a test's hook instead of waiting.
    #[cfg(test)]
    Hook(Box<dyn FnMut() + Send>),
}

impl Gather {
    /// Waits; `false` (at once) if this writer never does.
    fn wait(&mut self) -> bool {
        match self {
            Self::Never => return false,
            Self::Block(d) => std::thread::sleep(*d),
            #[cfg(test)]
            Self::Hook(hook) => hook(),
        }
        true
    }
}

/// Whether the journal rows of `batch` come from more than one session
/// (more than one stream of rows: a reloaded session is a new one).
fn several_sessions(batch: &[WriteOp]) -> bool {
    let mut first = None;
    for op in batch {
        if let WriteOp::Row(_, sink) = op {
            match first {
                None => first = Some(sink.id()),
                Some(id) if id != sink.id() => return true,
                Some(_) => {}
            }
        }
    }
    false
}

/// The writer task: waits for one write, takes everything else already
/// queued (up to [`MAX_BATCH`]), commits it all at once, then tells each
/// waiter. While more than one session is writing (this batch or the last
/// one held several sessions' rows), it first waits as `gather` says and
/// takes what queued meanwhile. Runs until every sender is gone.
async fn writer(
    mut committer: impl Committer,
    mut rx: mpsc::Receiver<Queued>,
    metrics: Arc<Metrics>,
    failing_until: Arc<AtomicI64>,
    mut gather: Gather,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    // Ids of sinks whose session had a write fail: their later rows are
    // refused, so a session's journal never has a gap in its seqs. Ids are
    // never reused, so a reload of the session (a new sink) writes again.
    let mut poisoned: HashSet<u64> = HashSet::new();
    let mut queued = Vec::with_capacity(MAX_BATCH);
    let mut settled = Vec::new();
    let mut busy = false;
    // The database gave no answer in time: until the hold ends, batches
    // fail with this at once.
    let mut unanswered: Option<StorageError> = None;
    while rx.recv_many(&mut queued, MAX_BATCH).await > 0 {
        let mut taken = queued.len();
        take(&mut queued, &mut batch, &mut settled);
        if (busy || several_sessions(&batch)) && taken < MAX_BATCH && gather.wait() {
            while taken < MAX_BATCH
                && let Ok(q) = rx.try_recv()
            {
                queued.push(q);
                taken += 1;
            }
            take(&mut queued, &mut batch, &mut settled);
        }
        busy = several_sessions(&batch);
        if !batch.is_empty() {
            if now_ms() >= failing_until.load(Ordering::Acquire) {
                unanswered = None;
            }
            unanswered = commit_batch(
                &mut committer,
                &mut batch,
                &mut poisoned,
                &metrics,
                &failing_until,
                unanswered,
            )
            .await;
        }
        for done in settled.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Whether a batch's results say storage as a whole is failing (a full
/// disk, a lock held too long): nothing of the batch went in, and some
/// write failed for the store's sake. One bad row among good ones fails
/// only its own session; a batch whose writes failed only for their own
/// data (a string the database cannot hold) or were not tried says
/// nothing about the store, so nobody else is refused for it.
fn store_failing(results: &[Result<(), StorageError>]) -> bool {
    !results.iter().any(Result::is_ok)
        && results
            .iter()
            .any(|r| r.as_ref().is_err_and(StorageError::is_the_stores))
}

/// Moves what was queued into the batch, and the `settled` markers aside.
fn take(
    queued: &mut Vec<Queued>,
    batch: &mut Vec<WriteOp>,
    settled: &mut Vec<oneshot::Sender<()>>,
) {
    for q in queued.drain(..) {
        match q {
            Queued::One(op) => batch.push(op),
            Queued::Many(ops) => batch.extend(ops),
            Queued::Settled(done) => settled.push(done),
        }
    }
}

/// Commits `batch` (retrying its writes one by one if it fails as a
/// whole for what may be one write's data), then tells each waiter and
/// empties it. With `unanswered` (the database gave no answer in time
/// moments ago) it fails at once with that error. Answers the error a
/// batch now fails with at once, if this one found the database not
/// answering.
async fn commit_batch(
    committer: &mut impl Committer,
    batch: &mut Vec<WriteOp>,
    poisoned: &mut HashSet<u64>,
    metrics: &Metrics,
    failing_until: &AtomicI64,
    unanswered: Option<StorageError>,
) -> Option<StorageError> {
    let refused = || StorageError::AfterFailure;
    let is_refused = |op: &WriteOp, poisoned: &HashSet<u64>| matches!(op, WriteOp::Row(_, sink) if poisoned.contains(&sink.id()));
    let writable: Vec<&WriteOp> = batch
        .iter()
        .filter(|op| !is_refused(op, poisoned))
        .collect();
    let started = std::time::Instant::now();
    let failed_fast = unanswered.is_some();
    let outcome = match unanswered {
        Some(e) => Err(e),
        None => committer.commit(&writable).await,
    };
    let mut slow_failure = None;
    let results: Vec<Result<(), StorageError>> = match outcome {
        Ok(()) => batch
            .iter()
            .map(|op| {
                if is_refused(op, poisoned) {
                    Err(refused())
                } else {
                    Ok(())
                }
            })
            .collect(),
        // The database did not answer or the connection broke: no write's
        // data is to blame, and whether the batch went in is unknown.
        // Every write fails (its session reloads what is durable); none
        // is tried again here, which could write it twice or wait again.
        Err(e @ StorageError::Unavailable(_)) => {
            tracing::error!(error = %e, ops = batch.len(), "batch commit failed; the database is unavailable");
            if failed_fast || started.elapsed() >= SLOW_FAILURE {
                slow_failure = Some(e.clone());
            }
            batch
                .iter()
                .map(|op| {
                    if is_refused(op, poisoned) {
                        return Err(refused());
                    }
                    if let WriteOp::Row(_, sink) = op {
                        poisoned.insert(sink.id());
                    }
                    Err(e.clone())
                })
                .collect()
        }
        Err(e) => {
            // Isolate the failing write so one bad row does not fail
            // every session that shared the batch.
            tracing::warn!(error = %e, ops = batch.len(), "batch commit failed; retrying writes one by one");
            // A store that fails every write (disk full, gone) must not
            // cost one busy timeout per row: after a few failures in a
            // row the rest of the batch fails without another try.
            let mut results = Vec::with_capacity(batch.len());
            let mut failures_in_a_row = 0;
            // What the writes not tried are failed with: the store's last
            // failure, never another write's data error.
            let mut store_error = e;
            for op in batch.iter() {
                if is_refused(op, poisoned) {
                    results.push(Err(refused()));
                    continue;
                }
                let r = if failures_in_a_row >= RETRY_GIVE_UP {
                    Err(store_error.clone())
                } else {
                    committer.commit(&[op]).await
                };
                match &r {
                    Ok(()) => failures_in_a_row = 0,
                    // The store answered; only this write's data failed.
                    Err(e) if !e.is_the_stores() => {
                        failures_in_a_row = 0;
                        tracing::warn!(error = %e, "a write's data cannot be stored; it alone fails");
                    }
                    Err(e) => {
                        failures_in_a_row += 1;
                        store_error = e.clone();
                        tracing::error!(error = %e, "journal write failed");
                    }
                }
                if r.is_err()
                    && let WriteOp::Row(_, sink) = op
                {
                    poisoned.insert(sink.id());
                }
                results.push(r);
            }
            results
        }
    };
    // Failing at once does not lengthen the hold: when it ends, the next
    // batch tries the database again.
    if store_failing(&results) && !failed_fast {
        failing_until.store(now_ms() + FAILURE_HOLD_MS, Ordering::Release);
    }
    metrics.commit_seconds.observe_duration(started.elapsed());
    metrics.commit_rows.observe(writable.len() as f64);
    tracing::debug!(
        ops = batch.len(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "group commit"
    );
    // One notice per session per batch: the highest seq now durable, or
    // the first failure.
    let mut sessions: HashMap<&str, (&DurableSink, Result<u64, StorageError>)> = HashMap::new();
    for (op, result) in batch.iter().zip(&results) {
        if let WriteOp::Row(row, sink) = op {
            let entry = sessions
                .entry(row.session_id.as_str())
                .or_insert((sink, Ok(row.seq)));
            entry.1 = match (&entry.1, result) {
                (Err(e), _) | (Ok(_), Err(e)) => Err(e.clone()),
                (Ok(seq), Ok(())) => Ok((*seq).max(row.seq)),
            };
        }
    }
    for (sink, result) in sessions.into_values() {
        sink.notify(result);
    }
    for (op, result) in batch.drain(..).zip(results) {
        match op {
            WriteOp::Snapshot {
                done: Some(done), ..
            }
            | WriteOp::CreateSession { done, .. }
            | WriteOp::Enqueue { done, .. }
            | WriteOp::Record(QueuedRecord { done, .. }) => {
                let _ = done.send(result);
            }
            _ => {}
        }
    }
    slow_failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Commits nothing, slowly: yields to every other task many times
    /// before it counts the writes of a batch as committed.
    struct SlowCommitter(Arc<AtomicUsize>);

    impl Committer for SlowCommitter {
        async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            self.0.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    /// Records the size of every batch it commits.
    struct Batches(Arc<std::sync::Mutex<Vec<usize>>>);

    impl Committer for Batches {
        async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
            self.0.lock().expect("not poisoned").push(batch.len());
            Ok(())
        }
    }

    #[actix::test]
    async fn while_several_sessions_write_a_batch_waits_for_more_and_a_session_alone_does_not() {
        use crate::storage::sqlite::tests::{row, sink, until};
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let waits = Arc::new(AtomicUsize::new(0));
        // What the test queues while the writer waits, one per wait.
        type Arrival = Box<dyn FnOnce() + Send>;
        let arrivals: Arc<std::sync::Mutex<Vec<Arrival>>> = Arc::default();
        let hook = {
            let (waits, arrivals) = (waits.clone(), arrivals.clone());
            move || {
                waits.fetch_add(1, Ordering::SeqCst);
                if let Some(arrive) = arrivals.lock().expect("not poisoned").pop() {
                    arrive();
                }
            }
        };
        let writes = Writes::start_with(
            Batches(batches.clone()),
            Arc::new(Metrics::default()),
            Gather::Hook(Box::new(hook)),
        );
        let committed = || batches.lock().expect("not poisoned").clone();

        // One session alone commits at once.
        let (a, mut a_rx) = sink();
        writes.append(row("a", 1), a.clone());
        writes.append(row("a", 2), a);
        assert_eq!(until(&mut a_rx, 2).await.ok(), Some(2));
        assert_eq!(waits.load(Ordering::SeqCst), 0);
        assert_eq!(committed(), [2]);

        // Two sessions: the writer waits, and what came meanwhile joins
        // the batch.
        let (b, mut b_rx) = sink();
        let (c, mut c_rx) = sink();
        let (d, mut d_rx) = sink();
        let late = writes.clone();
        arrivals
            .lock()
            .expect("not poisoned")
            .push(Box::new(move || late.append(row("d", 1), d)));
        writes.append(row("b", 1), b);
        writes.append(row("c", 1), c);
        assert_eq!(until(&mut b_rx, 1).await.ok(), Some(1));
        assert_eq!(until(&mut c_rx, 1).await.ok(), Some(1));
        assert_eq!(until(&mut d_rx, 1).await.ok(), Some(1));
        assert_eq!(waits.load(Ordering::SeqCst), 1);
        assert_eq!(committed(), [2, 3]);

        // Right after a batch of several sessions a lone write waits too;
        // once a batch was one session's, the next does not.
        let (e, mut e_rx) = sink();
        writes.append(row("e", 1), e);
        assert_eq!(until(&mut e_rx, 1).await.ok(), Some(1));
        assert_eq!(waits.load(Ordering::SeqCst), 2);
        let (f, mut f_rx) = sink();
        writes.append(row("f", 1), f);
        assert_eq!(until(&mut f_rx, 1).await.ok(), Some(1));
        assert_eq!(waits.load(Ordering::SeqCst), 2);
        assert_eq!(committed(), [2, 3, 1, 1]);
    }

    /// Records each batch's size; refuses the data of any batch holding a
    /// row of a session named `bad…` (as PostgreSQL refuses a string
    /// holding U+0000), or, when `broken`, fails every batch as a store
    /// that cannot write does.
    struct Picky {
        batches: Arc<std::sync::Mutex<Vec<usize>>>,
        broken: bool,
    }

    impl Committer for Picky {
        async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
            self.batches.lock().expect("not poisoned").push(batch.len());
            if self.broken {
                return Err(StorageError::Database("disk I/O error".into()));
            }
            let bad =
                |op: &&WriteOp| matches!(op, WriteOp::Row(r, _) if r.session_id.starts_with("bad"));
            if batch.iter().any(bad) {
                return Err(StorageError::Unstorable(
                    "invalid byte sequence for encoding \"UTF8\": 0x00".into(),
                ));
            }
            Ok(())
        }
    }

    #[test]
    fn only_the_stores_own_failures_say_it_is_failing() {
        let ok = || Ok(());
        let data = || Err(StorageError::Unstorable("0x00".into()));
        let store = || Err(StorageError::Database("disk I/O error".into()));
        let skipped = || Err(StorageError::AfterFailure);
        let table: [(Vec<Result<(), StorageError>>, bool); 7] = [
            (vec![store()], true),
            (vec![store(), data(), skipped()], true),
            (vec![data()], false),
            (vec![data(), data(), data(), data()], false),
            (vec![skipped(), data()], false),
            (vec![store(), ok()], false),
            (vec![], false),
        ];
        for (results, failing) in table {
            assert_eq!(store_failing(&results), failing, "{results:?}");
        }
    }

    #[actix::test]
    async fn a_write_refused_for_its_data_fails_alone_and_holds_nothing() {
        use crate::storage::sqlite::tests::{row, sink, until};
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writes = Writes::start(
            Picky {
                batches: batches.clone(),
                broken: false,
            },
            Arc::new(Metrics::default()),
        );
        // More bad rows than RETRY_GIVE_UP, then a good one, in one batch:
        // every write is tried on its own, and the good one goes in.
        let mut bad = Vec::new();
        for n in 1..=5 {
            let (s, rx) = sink();
            writes.append(row(&format!("bad{n}"), 1), s.clone());
            bad.push((s, rx));
        }
        let (good, mut good_rx) = sink();
        writes.append(row("good", 1), good.clone());
        for (_, rx) in &mut bad {
            assert!(matches!(
                until(rx, 1).await,
                Err(StorageError::Unstorable(_))
            ));
        }
        assert_eq!(until(&mut good_rx, 1).await.ok(), Some(1));
        assert_eq!(
            *batches.lock().expect("not poisoned"),
            [6, 1, 1, 1, 1, 1, 1]
        );
        assert_eq!(writes.refusing(), None);

        // A bad row alone, then a later row of a session that failed: each
        // fails, the store is not held, and other sessions write on.
        let (lone, mut lone_rx) = sink();
        writes.append(row("bad_lone", 1), lone);
        assert!(matches!(
            until(&mut lone_rx, 1).await,
            Err(StorageError::Unstorable(_))
        ));
        let (failed, mut failed_rx) = bad.remove(0);
        writes.append(row("bad1", 2), failed);
        assert!(matches!(
            until(&mut failed_rx, 2).await,
            Err(StorageError::AfterFailure)
        ));
        assert_eq!(writes.refusing(), None);
        writes.append(row("good", 2), good);
        assert_eq!(until(&mut good_rx, 2).await.ok(), Some(2));
    }

    #[actix::test]
    async fn a_store_that_fails_every_write_is_held_and_given_up_on() {
        use crate::storage::sqlite::tests::{row, sink, until};
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writes = Writes::start(
            Picky {
                batches: batches.clone(),
                broken: true,
            },
            Arc::new(Metrics::default()),
        );
        let mut rxs = Vec::new();
        for n in 1..=5 {
            let (s, rx) = sink();
            writes.append(row(&format!("s{n}"), 1), s);
            rxs.push(rx);
        }
        for rx in &mut rxs {
            assert!(matches!(until(rx, 1).await, Err(StorageError::Database(_))));
        }
        assert_eq!(*batches.lock().expect("not poisoned"), [5, 1, 1, 1]);
        assert_eq!(writes.refusing(), Some(STORAGE_FAILING));
    }

    /// A database that cannot be reached: each commit fails as
    /// unavailable, after `wait` (no answer) or at once (refused).
    struct Gone {
        batches: Arc<std::sync::Mutex<Vec<usize>>>,
        wait: std::time::Duration,
    }

    impl Committer for Gone {
        async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
            self.batches.lock().expect("not poisoned").push(batch.len());
            tokio::time::sleep(self.wait).await;
            Err(StorageError::Unavailable("no answer".into()))
        }
    }

    #[actix::test]
    async fn an_unavailable_database_fails_the_batch_once_and_a_silent_one_fails_at_once_after() {
        use crate::storage::sqlite::tests::{row, sink, until};
        for (wait, batches_tried) in [
            // Refused at once: every batch tries again (a cut connection
            // is replaced by the next).
            (std::time::Duration::ZERO, vec![3, 1]),
            // No answer for a while: until the hold ends, the next batch
            // fails without waiting again.
            (SLOW_FAILURE, vec![3]),
        ] {
            let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
            let writes = Writes::start(
                Gone {
                    batches: batches.clone(),
                    wait,
                },
                Arc::new(Metrics::default()),
            );
            let mut rxs = Vec::new();
            for n in 1..=3 {
                let (s, rx) = sink();
                writes.append(row(&format!("s{n}"), 1), s);
                rxs.push(rx);
            }
            // Not retried one by one: no write's data is to blame.
            for rx in &mut rxs {
                let failed = until(rx, 1).await;
                assert!(
                    matches!(failed, Err(StorageError::Unavailable(_))),
                    "{failed:?}"
                );
            }
            assert_eq!(writes.refusing(), Some(STORAGE_FAILING));
            let (late, mut late_rx) = sink();
            writes.append(row("late", 1), late);
            let failed = until(&mut late_rx, 1).await;
            assert!(
                matches!(failed, Err(StorageError::Unavailable(_))),
                "{failed:?}"
            );
            assert_eq!(
                *batches.lock().expect("not poisoned"),
                batches_tried,
                "{wait:?}"
            );
        }
    }

    #[actix::test]
    async fn settled_answers_after_the_writes_queued_before_it_are_committed() {
        let committed = Arc::new(AtomicUsize::new(0));
        let writes = Writes::start(
            SlowCommitter(committed.clone()),
            Arc::new(Metrics::default()),
        );
        for turn in ["turn_1", "turn_2", "turn_3"] {
            writes.dequeue(&"s".into(), &turn.into(), Epoch::Sole);
        }
        writes.settled().await;
        assert_eq!(committed.load(Ordering::SeqCst), 3);
        // With nothing queued it answers too.
        writes.settled().await;
        assert_eq!(committed.load(Ordering::SeqCst), 3);
    }
}
