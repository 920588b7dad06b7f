//! Log lines written out in bulk. A busy node logs a line per tool call
//! (the audit event); written one `write` call each, those lines cost about
//! as much as the rest of the call's bookkeeping. Here a line is appended
//! to a buffer shared by every thread, and the buffer goes out in one
//! write every [`FLUSH_EVERY`], at once when it passes [`FLUSH_AT`] bytes,
//! and when the process ends normally ([`BulkWriter::flush`]). A line waits
//! at most [`FLUSH_EVERY`]; the durable record of every call is the audit
//! ledger in the database, not the log.
//!
//! Errors a client causes inside actix's HTTP dispatchers (a malformed
//! request, a connection cut mid-body) are logged there at `ERROR`, one
//! line each, so anyone could fill the log. [`ClientErrors`] takes them out
//! and writes one `WARN` line per [`CLIENT_ERRORS_EVERY`] with their count
//! and the first of them.

use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::{FormatFields, Writer};
use tracing_subscriber::layer::{Context, Layer};

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

/// How often the errors [`ClientErrors`] took out are summed up in one
/// `WARN` line (when there were any).
pub const CLIENT_ERRORS_EVERY: Duration = Duration::from_secs(10);
/// Where actix's HTTP/1 and HTTP/2 dispatchers log, per connection, what a
/// client did wrong: their `ERROR` and `WARN` events are a client's doing.
const CLIENT_ERROR_TARGETS: [&str; 2] = ["actix_http::h1", "actix_http::h2"];
/// The first error of an interval is quoted in its summary up to this many
/// characters.
const QUOTED_ERROR_CHARS: usize = 200;

/// A layer that keeps actix's per-request errors out of the log and counts
/// them instead; [`ClientErrors::new`] starts the thread that writes their
/// summary. Put it outermost, so no other layer sees those events.
#[derive(Clone)]
pub struct ClientErrors {
    shared: Arc<ErrorTally>,
}

#[derive(Default)]
struct ErrorTally {
    /// Events taken out since the last summary.
    count: AtomicU64,
    /// The message of the first of them.
    first: Mutex<Option<String>>,
}

impl ClientErrors {
    /// The layer, with a thread of its own that writes a summary every
    /// [`CLIENT_ERRORS_EVERY`]; the thread ends with the last clone.
    pub fn new() -> Self {
        let errors = Self::unsummarized();
        let shared = Arc::downgrade(&errors.shared);
        let started = std::thread::Builder::new()
            .name("questd-client-errors".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(CLIENT_ERRORS_EVERY);
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    summarize(&shared);
                }
            });
        if let Err(e) = started {
            eprintln!("the thread that sums up client errors did not start ({e})");
        }
        errors
    }

    /// A layer no thread summarizes ([`ClientErrors::summarize`] does).
    fn unsummarized() -> Self {
        Self {
            shared: Arc::default(),
        }
    }

    /// Writes the summary of the errors taken out since the last one.
    pub fn summarize(&self) {
        summarize(&self.shared);
    }
}

impl Default for ClientErrors {
    fn default() -> Self {
        Self::new()
    }
}

/// One `WARN` line for the errors counted since the last, if any.
fn summarize(tally: &ErrorTally) {
    let count = tally.count.swap(0, Ordering::AcqRel);
    let first = lock(&tally.first).take().unwrap_or_default();
    if count > 0 {
        tracing::warn!(
            count,
            first = %first,
            every_s = CLIENT_ERRORS_EVERY.as_secs(),
            "malformed or cut-off HTTP requests refused"
        );
    }
}

/// Whether an event is a client's error logged by actix's dispatchers.
fn is_client_error(event: &Event<'_>) -> bool {
    let meta = event.metadata();
    *meta.level() <= Level::WARN
        && CLIENT_ERROR_TARGETS
            .iter()
            .any(|t| meta.target().starts_with(t))
}

impl<S: Subscriber> Layer<S> for ClientErrors {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        if !is_client_error(event) {
            return true;
        }
        if self.shared.count.fetch_add(1, Ordering::AcqRel) == 0 {
            let mut message = MessageText(String::new());
            event.record(&mut message);
            let quoted: String = message.0.chars().take(QUOTED_ERROR_CHARS).collect();
            *lock(&self.shared.first) = Some(quoted);
        }
        false
    }
}

/// An event's `message` field as text.
struct MessageText(String);

impl Visit for MessageText {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
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

/// The fields of a plain-text log line (no colours), written exactly as
/// `tracing-subscriber`'s `DefaultFields` writes them: `name=value` pairs
/// with the value in `Debug` form, the message bare, control characters
/// in the message and in errors escaped. The default paints every name
/// and every `=` with a terminal style through `write!`, an empty style
/// when there are no colours; a busy node logs a line of twenty fields
/// per tool call (the audit event), and those paints were about half of
/// its cost. With colours on, the default is used.
pub struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            sanitize: writer.sanitizes_ansi_escapes(),
            writer,
            empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'w> {
    writer: Writer<'w>,
    sanitize: bool,
    /// No field written yet: the next one has no space before it.
    empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Starts a field: a space before every field but the first. False
    /// when an earlier write failed (nothing more is written).
    fn next_field(&mut self) -> bool {
        if self.result.is_ok() && !std::mem::take(&mut self.empty) {
            self.result = self.writer.write_char(' ');
        }
        self.result.is_ok()
    }

    /// Writes `name=` and then the value with `value`; fields of records
    /// from the `log` crate, which the line's header already shows, are
    /// left out.
    fn named(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        let name = field.name();
        if name.starts_with("log.") || !self.next_field() {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        let w = &mut self.writer;
        self.result = w
            .write_str(name)
            .and_then(|()| w.write_char('='))
            .and_then(|()| value(w));
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else if value
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
        {
            // What `{:?}` writes for a text with nothing to escape, without
            // looking at each character again through the formatter.
            self.named(field, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            });
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.named(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.named(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.named(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let sanitize = self.sanitize;
        let error = Escaped(format_args!("{value}"), sanitize);
        match value.source() {
            Some(source) => self.record_debug(
                field,
                &format_args!(
                    "{error} {}.sources={}",
                    field.name(),
                    Sources(source, sanitize)
                ),
            ),
            None => self.record_debug(field, &format_args!("{error}")),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() != "message" {
            self.named(field, |w| write!(w, "{value:?}"));
        } else if self.next_field() {
            // The message bare, its control characters escaped.
            let sanitize = self.sanitize;
            self.result = write!(self.writer, "{:?}", Escaped(value, sanitize));
        }
    }
}

/// A value written with the control characters a terminal acts on
/// escaped (when `.1`), as `tracing-subscriber` writes messages.
struct Escaped<T>(T, bool);

impl<T> Escaped<T> {
    /// Writes `text` (this value, formatted) escaped or as it is.
    fn write(&self, f: &mut fmt::Formatter<'_>, text: fmt::Arguments<'_>) -> fmt::Result {
        if self.1 {
            Escaping(f).write_fmt(text)
        } else {
            f.write_fmt(text)
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, format_args!("{:?}", self.0))
    }
}

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, format_args!("{}", self.0))
    }
}

struct Escaping<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // A text with none of the characters below (C1 controls all start
        // with the byte 0xC2) goes out whole, not a character at a time.
        if !s
            .bytes()
            .any(|b| matches!(b, 0x1b | 0x07 | 0x08 | 0x0c | 0x7f | 0xc2))
        {
            return self.0.write_str(s);
        }
        for c in s.chars() {
            match c {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                c if ('\u{80}'..='\u{9f}').contains(&c) => write!(self.0, "\\u{{{:x}}}", c as u32)?,
                c => self.0.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// An error and its sources, as a list.
struct Sources<'a>(&'a (dyn std::error::Error + 'static), bool);

impl fmt::Display for Sources<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        let mut error = Some(self.0);
        while let Some(e) = error {
            list.entry(&Escaped(format_args!("{e}"), self.1));
            error = e.source();
        }
        list.finish()
    }
}

/// The time at the head of a log line, written as `tracing-subscriber`'s
/// default (`SystemTime`) writes it: UTC, RFC 3339 to the microsecond
/// (`2026-11-28T01:43:19.123456Z`). The default works out the date and
/// writes each of its numbers through the formatter for every line, about
/// a fifth of an audit line's cost; here a thread works the date and time
/// out once a second and writes the microseconds itself. Times before
/// 1970 or after 9999 are left to the default.
pub struct LineTime;

/// The digits of a line's time: `YYYY-MM-DDTHH:MM:SS.uuuuuuZ`.
type Stamp = [u8; 27];

thread_local! {
    /// The second last written on this thread and its stamp.
    static SECOND: std::cell::Cell<(u64, Stamp)> = const { std::cell::Cell::new((u64::MAX, [0; 27])) };
}

/// Seconds since the epoch of 10000-01-01T00:00:00Z.
const YEAR_10000: u64 = 253_402_300_800;

impl tracing_subscriber::fmt::time::FormatTime for LineTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        match since {
            Ok(d) if d.as_secs() < YEAR_10000 => {
                let stamp = SECOND.with(|cached| {
                    let (second, mut stamp) = cached.get();
                    if second != d.as_secs() {
                        stamp = to_the_second(d.as_secs());
                        cached.set((d.as_secs(), stamp));
                    }
                    micros(&mut stamp, d.subsec_micros());
                    stamp
                });
                // Only ASCII digits and separators were written.
                w.write_str(std::str::from_utf8(&stamp).map_err(|_| fmt::Error)?)
            }
            _ => tracing_subscriber::fmt::time::SystemTime.format_time(w),
        }
    }
}

/// The stamp of `secs` since the epoch (before year 10000), its
/// microseconds zero.
fn to_the_second(secs: u64) -> Stamp {
    let (days, in_day) = (secs / 86_400, secs % 86_400);
    // Days before year 10000 fit an i64, and so do their dates.
    let (year, month, day) = crate::civil::date(days as i64);
    let [year, month, day] = [year, month, day].map(|n| n as u64);
    let mut stamp = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            stamp[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, in_day / 3600);
    put(14, 2, in_day / 60 % 60);
    put(17, 2, in_day % 60);
    stamp
}

/// Writes `us` (under a million) into the stamp's six microsecond digits.
fn micros(stamp: &mut Stamp, mut us: u32) {
    for i in (20..26).rev() {
        stamp[i] = b'0' + (us % 10) as u8;
        us /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_become_one_warning_per_interval() {
        use tracing_subscriber::layer::SubscriberExt;
        let sink = Sink::default();
        let logs = BulkWriter::unflushed(sink.clone());
        let errors = ClientErrors::unsummarized();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(logs.clone())
            .finish()
            .with(errors.clone());
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..1000 {
                tracing::error!(
                    target: "actix_http::h1::dispatcher",
                    "stream error: Request parse error: Invalid Header provided {i}"
                );
            }
            tracing::warn!(target: "actix_http::h2::dispatcher", "Send data error");
            // Everything else is left alone, actix's own less severe lines
            // and other errors included.
            tracing::debug!(target: "actix_http::h1::dispatcher", "kept at debug");
            tracing::error!(target: "questd::storage", "a real error");
            errors.summarize();
            // Nothing since the last summary: no line.
            errors.summarize();
            tracing::error!(target: "actix_http::h1::decoder", "MAX_BUFFER_SIZE reached");
            errors.summarize();
        });
        logs.flush().unwrap();
        let text = sink.text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            !text.contains("ERROR actix_http") && !text.contains("Invalid Header provided 1"),
            "{text}"
        );
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("ERROR") && lines[0].contains("a real error"));
        assert!(
            lines[1].starts_with(" WARN")
                && lines[1].contains("count=1001")
                && lines[1].contains("Invalid Header provided 0"),
            "{text}"
        );
        assert!(
            lines[2].contains("count=1") && lines[2].contains("MAX_BUFFER_SIZE"),
            "{text}"
        );
    }

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

    /// An error with a cause, for the error fields below.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the write failed")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// What a plain-text subscriber writes for a set of events: with the
    /// default field formatter, or with [`PlainFields`].
    fn lines(plain: bool) -> String {
        let sink = Sink::default();
        let logs = BulkWriter::unflushed(sink.clone());
        let builder = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(logs.clone());
        let events = || {
            let trace = "tr_0VcAF18mpgCNV8y1VOALrZLm";
            tracing::info!(
                event = "tool_call_success", trace_id = %trace, session_id = "sess_x",
                site_id = "", latency_ms = 0.051, prompt_tokens = 0i64, count = 7u64,
                failed = false, "{}", "tool_call_success"
            );
            tracing::warn!(
                text = "say \"hi\"\n\ttab é \u{1b}[31m",
                "a \u{1b}[31mred\u{7} message\u{85}"
            );
            tracing::error!(r#type = "raw name", list = ?vec![1, 2], "done");
            tracing::info!(
                plain = " a~b ",
                empty = "",
                neg = -42i64,
                big = u64::MAX,
                yes = true,
                quote = "\"",
                backslash = "a\\b",
                combining = "e\u{301}",
                del = "x\u{7f}",
                cjk = "掷骰子",
                tab = "\t",
                ratio = 1.0f64,
                "{}",
                "fields"
            );
            let cause = std::io::Error::other("disk \u{1b} full");
            let outer = Outer(std::io::Error::other("disk \u{1b} full"));
            tracing::error!(
                error = &cause as &(dyn std::error::Error + 'static),
                "alone"
            );
            tracing::error!(
                error = &outer as &(dyn std::error::Error + 'static),
                "with a source"
            );
            let span = tracing::info_span!("turn", turn_id = "turn_1", n = 3);
            let _in = span.enter();
            tracing::info!("inside");
            tracing::info!(only = 1);
        };
        if plain {
            tracing::subscriber::with_default(builder.fmt_fields(PlainFields).finish(), events);
        } else {
            tracing::subscriber::with_default(builder.finish(), events);
        }
        logs.flush().expect("flushed");
        sink.text()
    }

    #[test]
    fn plain_fields_write_what_the_default_writes_without_colours() {
        let want = lines(false);
        assert!(
            want.contains("trace_id=tr_0VcAF18mpgCNV8y1VOALrZLm"),
            "{want}"
        );
        assert!(want.contains("\\x1b"), "escaped: {want}");
        assert_eq!(want.lines().count(), 8, "{want}");
        assert_eq!(lines(true), want);
    }

    #[test]
    fn a_lines_time_reads_as_the_defaults_does() {
        let stamp = |secs: u64, us: u32| {
            let mut stamp = to_the_second(secs);
            micros(&mut stamp, us);
            String::from_utf8(stamp.to_vec()).unwrap()
        };
        // Checked against Python's `datetime` in UTC.
        for (secs, us, want) in [
            (0, 0, "1970-01-01T00:00:00.000000Z"),
            (951_782_400, 0, "2000-02-29T00:00:00.000000Z"),
            (951_868_799, 999_999, "2000-02-29T23:59:59.999999Z"),
            (4_107_542_400, 0, "2100-03-01T00:00:00.000000Z"),
            (1_795_830_048, 711_234, "2026-11-28T01:40:48.711234Z"),
            (1_798_761_599, 500_000, "2026-12-31T23:59:59.500000Z"),
            (YEAR_10000 - 1, 7, "9999-12-31T23:59:59.000007Z"),
        ] {
            assert_eq!(stamp(secs, us), want);
        }
        // A line's time has the default's shape: everything but the digits
        // the same.
        let time = |timer: &dyn tracing_subscriber::fmt::time::FormatTime| {
            let mut text = String::new();
            timer.format_time(&mut Writer::new(&mut text)).unwrap();
            text.replace(|c: char| c.is_ascii_digit(), "0")
        };
        assert_eq!(
            time(&LineTime),
            time(&tracing_subscriber::fmt::time::SystemTime)
        );
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
