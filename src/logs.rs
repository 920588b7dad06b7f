//! Log lines written out in bulk. A busy node logs a line per tool call
//! (the audit event); written one `write` call each, those lines cost about
//! as much as the rest of the call's bookkeeping. Here a line is appended
//! to a buffer shared by every thread, and the buffer goes out in one
//! write every [`FLUSH_EVERY`], at once when it passes [`FLUSH_AT`] bytes,
//! and when the process ends normally ([`BulkWriter::flush`]). A line waits
//! at most [`FLUSH_EVERY`]; the durable record of every call is the audit
//! ledger in the database, not the log.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Longest a line waits in the buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// A buffer this full is written out at once, by the thread that filled it.
pub const FLUSH_AT: usize = 64 * 1024;

/// Where the log's lines go (stdout or stderr), through the shared buffer.
#[derive(Clone)]
pub struct BulkWriter {
    shared: Arc<Shared>,
}

struct Shared {
    /// Lines not yet written, in the order they were logged.
    pending: Mutex<Vec<u8>>,
    /// Where lines go; held while a chunk is written, so chunks keep their
    /// order.
    out: Mutex<Box<dyn Write + Send>>,
}

/// Takes a lock whether or not a thread panicked while it held it: a log
/// buffer stays usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn flush(&self) -> io::Result<()> {
        let mut out = lock(&self.out);
        let chunk = {
            let mut pending = lock(&self.pending);
            if pending.is_empty() {
                Vec::new()
            } else {
                // The buffer left in its place is already its usual size,
                // so lines logged meanwhile do not grow it step by step.
                std::mem::replace(&mut *pending, Vec::with_capacity(FLUSH_AT))
            }
        };
        if !chunk.is_empty() {
            out.write_all(&chunk)?;
        }
        out.flush()
    }
}

impl BulkWriter {
    /// Lines for `out`, written by a thread of its own every
    /// [`FLUSH_EVERY`]; the thread ends with the last clone.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        let writer = Self::unflushed(out);
        let shared = Arc::downgrade(&writer.shared);
        let started = std::thread::Builder::new()
            .name("questd-logs".into())
            .spawn(move || flush_until_gone(shared));
        if let Err(e) = started {
            // Lines still go out when the buffer fills and at the end.
            eprintln!("the log's writer thread did not start ({e}); lines go out in larger chunks");
        }
        writer
    }

    /// A writer no thread flushes: lines go out when the buffer fills or
    /// on [`BulkWriter::flush`].
    fn unflushed(out: impl Write + Send + 'static) -> Self {
        Self {
            shared: Arc::new(Shared {
                pending: Mutex::new(Vec::with_capacity(FLUSH_AT)),
                out: Mutex::new(Box::new(out)),
            }),
        }
    }

    /// Writes every line logged so far.
    pub fn flush(&self) -> io::Result<()> {
        self.shared.flush()
    }
}

fn flush_until_gone(shared: Weak<Shared>) {
    loop {
        std::thread::sleep(FLUSH_EVERY);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        // A log that cannot be written has nowhere to report it.
        let _ = shared.flush();
    }
}

/// One event's writer: the formatter writes the whole line at once.
pub struct Line<'a> {
    shared: &'a Shared,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let full = {
            let mut pending = lock(&self.shared.pending);
            pending.extend_from_slice(buf);
            pending.len() >= FLUSH_AT
        };
        if full {
            self.shared.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BulkWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            shared: &self.shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test can read back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(lock(&self.0).clone()).expect("lines are text")
        }
    }

    #[test]
    fn lines_wait_for_a_flush_and_come_out_whole_and_in_order() {
        let sink = Sink::default();
        let logs = BulkWriter::unflushed(sink.clone());
        for n in 0..3 {
            let line = format!("line {n}\n");
            logs.make_writer()
                .write_all(line.as_bytes())
                .expect("buffered");
        }
        assert_eq!(sink.text(), "", "nothing is written before a flush");
        logs.flush().expect("flushed");
        assert_eq!(sink.text(), "line 0\nline 1\nline 2\n");
        logs.flush().expect("flushed again");
        assert_eq!(sink.text(), "line 0\nline 1\nline 2\n", "each line once");
    }

    #[test]
    fn a_full_buffer_goes_out_at_once() {
        let sink = Sink::default();
        let logs = BulkWriter::unflushed(sink.clone());
        let line = format!("{}\n", "x".repeat(1023));
        for _ in 0..FLUSH_AT / line.len() {
            logs.make_writer()
                .write_all(line.as_bytes())
                .expect("buffered");
        }
        assert_eq!(sink.text().len(), FLUSH_AT, "written when it filled");
        logs.make_writer().write_all(b"last\n").expect("buffered");
        assert_eq!(sink.text().len(), FLUSH_AT, "the next line waits again");
    }

    #[test]
    fn lines_from_many_threads_are_never_cut() {
        let sink = Sink::default();
        let logs = BulkWriter::unflushed(sink.clone());
        std::thread::scope(|s| {
            for t in 0..4 {
                let logs = &logs;
                s.spawn(move || {
                    for n in 0..2_000 {
                        // One write per line, as the log's formatter makes.
                        let line = format!("thread {t} line {n}\n");
                        logs.make_writer()
                            .write_all(line.as_bytes())
                            .expect("buffered");
                    }
                });
            }
        });
        logs.flush().expect("flushed");
        let text = sink.text();
        assert_eq!(text.lines().count(), 8_000);
        for t in 0..4 {
            let own: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("thread {t} ")))
                .collect();
            let want: Vec<String> = (0..2_000).map(|n| format!("thread {t} line {n}")).collect();
            assert_eq!(own, want, "thread {t}'s lines, whole and in order");
        }
    }
}
