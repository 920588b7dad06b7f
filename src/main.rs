//! The `questd` binary: parse settings, start logging, then run the server
//! or drive a load test against one.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use questd::config::{Cli, Command, LogFormat, Settings};
use questd::startup::Application;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system allocator: a turn allocates and frees
/// many small buffers (frames, JSON values, messages), which glibc's
/// malloc served at about an eighth of the server's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        None | Some(Command::Serve) => {
            init_logs(&cli.settings, false);
            actix_web::rt::System::new().block_on(async {
                Application::build(cli.settings)
                    .await?
                    .run_until_signalled()
                    .await
                    .map_err(anyhow::Error::from)
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Loadtest(args)) => {
            // stdout carries the report; logs go to stderr.
            init_logs(&cli.settings, true);
            Ok(questd::loadtest::main(&args)?)
        }
    }
}

fn init_logs(settings: &Settings, to_stderr: bool) {
    let filter = EnvFilter::try_new(&settings.log).unwrap_or_else(|e| {
        eprintln!("bad QUESTD_LOG filter ({e}); using info");
        EnvFilter::new("info")
    });
    // Colours only on a terminal: a log file or a pipe gets plain text.
    let ansi = if to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match (settings.log_format, to_stderr) {
        (LogFormat::Json, false) => logs.json().init(),
        (LogFormat::Json, true) => logs.json().with_writer(std::io::stderr).init(),
        (LogFormat::Pretty, false) => logs.init(),
        (LogFormat::Pretty, true) => logs.with_writer(std::io::stderr).init(),
    }
}
