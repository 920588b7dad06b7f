//! The `questd` binary: parse settings, start logging, run the server.

use clap::Parser;
use questd::config::{Cli, Command, LogFormat};
use questd::startup::Application;
use tracing_subscriber::EnvFilter;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = EnvFilter::try_new(&cli.settings.log).unwrap_or_else(|e| {
        eprintln!("bad QUESTD_LOG filter ({e}); using info");
        EnvFilter::new("info")
    });
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match cli.settings.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Pretty => logs.init(),
    }
    match cli.command {
        None | Some(Command::Serve) => {
            Application::build(cli.settings)
                .await?
                .run_until_stopped()
                .await?
        }
    }
    Ok(())
}
