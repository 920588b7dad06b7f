//! The `questd` binary: parse settings, start logging, then run the server,
//! drive a load test against one, or back up its database.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use questd::config::{Cli, Command, LogFormat, Settings};
use questd::logs::{BulkWriter, ClientErrors, LineTime, PlainFields};
use questd::startup::Application;
use questd::telemetry::{Config, SPAN_TARGET, Telemetry};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// mimalloc instead of the system allocator: a turn allocates and frees
/// many small buffers (frames, JSON values, messages), which glibc's
/// malloc served at about an eighth of the server's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        None | Some(Command::Serve) => {
            let (telemetry, not_started) = start_telemetry();
            let logs = init_logs(&cli.settings, false, telemetry.as_ref());
            match (&telemetry, not_started) {
                (Some(t), _) => t.report(),
                (None, Some(why)) => tracing::warn!(%why, "traces are not exported"),
                (None, None) => {}
            }
            let system = actix_web::rt::System::new();
            let ran = system.block_on(async {
                Application::build(cli.settings)
                    .await?
                    .run_until_signalled()
                    .await
                    .map_err(anyhow::Error::from)
            });
            // The spans still waiting, before the last lines.
            if let Some(t) = &telemetry {
                t.shutdown();
            }
            // The last lines, before an error (if any) is printed.
            let _ = logs.flush();
            if ran.is_err() {
                // A start that failed part way (a setting, a taken port,
                // the database) leaves actors that never ran: dropping the
                // runtime would run them outside it, and panic before the
                // error is printed. The process ends here anyway.
                std::mem::forget(system);
            }
            ran?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Loadtest(args)) => {
            // stdout carries the report; logs go to stderr.
            let logs = init_logs(&cli.settings, true, None);
            let ran = questd::loadtest::main(&args);
            let _ = logs.flush();
            Ok(ran?)
        }
        // Reports on stdout and stderr itself; nothing of it logs.
        Some(Command::Backup(args)) => Ok(questd::backup::main(&cli.settings.database_url, &args)),
    }
}

/// The trace exporter if the OTLP variables ask for one
/// (docs/protocol.md §12), or why it did not start when they were set
/// wrong (logged once logging runs; the server runs without traces).
fn start_telemetry() -> (Option<Telemetry>, Option<String>) {
    match Config::from_env().and_then(|c| c.map(Telemetry::start).transpose()) {
        Ok(t) => (t, None),
        Err(why) => (None, Some(why)),
    }
}

/// Starts logging to stdout, or stderr, with `telemetry`'s spans exported;
/// answers the writer to flush before the process ends.
fn init_logs(settings: &Settings, to_stderr: bool, telemetry: Option<&Telemetry>) -> BulkWriter {
    let mut filter = EnvFilter::try_new(&settings.log).unwrap_or_else(|e| {
        eprintln!("bad QUESTD_LOG filter ({e}); using info");
        EnvFilter::new("info")
    });
    if telemetry.is_some() {
        // The spans are exported whatever level the log is at.
        match format!("{SPAN_TARGET}=info").parse() {
            Ok(spans) => filter = filter.add_directive(spans),
            Err(e) => eprintln!("the spans' log directive does not parse ({e})"),
        }
    }
    // Colours only on a terminal: a log file or a pipe gets plain text.
    let ansi = if to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let writer = if to_stderr {
        BulkWriter::new(std::io::stderr())
    } else {
        BulkWriter::new(std::io::stdout())
    };
    // The layers `tracing_subscriber::fmt()` stacks, on a registry that
    // also takes the exporter's layer (which filters the spans it sees,
    // something `fmt::Subscriber` cannot carry).
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_timer(LineTime)
        .with_writer(writer.clone());
    let registry = tracing_subscriber::registry().with(filter);
    // Outermost, so actix's per-request errors reach no other layer.
    let client_errors = ClientErrors::new();
    match settings.log_format {
        LogFormat::Json => {
            let logs = registry.with(logs.json());
            let spans = telemetry.map(|t| t.layer());
            logs.with(spans).with(client_errors).init()
        }
        // The same text as the default's, written for less (logs.rs).
        LogFormat::Pretty if !ansi => {
            let logs = registry.with(logs.fmt_fields(PlainFields));
            let spans = telemetry.map(|t| t.layer());
            logs.with(spans).with(client_errors).init()
        }
        LogFormat::Pretty => {
            let logs = registry.with(logs);
            let spans = telemetry.map(|t| t.layer());
            logs.with(spans).with(client_errors).init()
        }
    }
    writer
}
