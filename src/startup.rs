//! Builds the application: storage, tools, model, session hub, HTTP server.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, ArbiterHandle};
use actix_web::dev::Server;
use actix_web::{App, web};
use anyhow::{Context as _, bail};
use socket2::{Domain, Protocol, Socket, Type};

use crate::budget::Budgets;
use crate::config::{LlmProvider, Settings, ToolMode};
use crate::game::Campaign;
use crate::http::accept::Accept;
use crate::http::admission::{Admission, connection_budget};
use crate::http::auth::Keys;
use crate::http::cluster::Cluster;
use crate::http::guard::GuardRules;
use crate::http::limits::ServiceState;
use crate::http::mcp::McpSessions;
use crate::http::{self, AppState};
use crate::llm::{OfflineGameMaster, OpenAiProvider, Provider, WithFallback};
use crate::metrics::Metrics;
use crate::session::tail::{self, DrainTails, Tails};
use crate::session::{DrainNode, Limits, Placement, Quotas, SessionDeps, SessionHub, StopHub};
use crate::storage::{Node, Store};
use crate::tools::Registry;

/// How long a drain waits for sessions to finish their turns.
const DRAIN_WITHIN: Duration = Duration::from_secs(30);

/// Pending connections the listener accepts, for connect storms.
const LISTEN_BACKLOG: i32 = 4096;
/// Seconds connections get to finish when the server stops.
const SHUTDOWN_GRACE_SECS: u64 = 3;

/// Binds the listening socket. Accepted sockets inherit `TCP_NODELAY` from
/// it, so small frames go out at once instead of waiting on delayed ACKs.
fn listen(bind: &str) -> anyhow::Result<TcpListener> {
    let addr: SocketAddr = bind
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{bind} names no address"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "{bind} is in use (another questd, or another server): stop it, or listen \
                 elsewhere with QUESTD_BIND=127.0.0.1:8081 (or --bind)"
            )
        } else {
            anyhow::Error::from(e)
        }
    })?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// A built server, bound and ready to run.
pub struct Application {
    port: u16,
    server: Server,
    hub: Addr<SessionHub>,
    tails: Addr<Tails>,
    store: Store,
    /// The task listening for journal commits; its database connection
    /// must close inside the runtime, so it is stopped before it ends.
    listener_task: actix_web::rt::task::JoinHandle<()>,
    /// The sessions' own arbiters (`QUESTD_SESSION_THREADS`), if any;
    /// stopped when the server stops.
    arbiters: Vec<ArbiterHandle>,
}

/// The model chosen by the settings.
pub fn provider_from(settings: &Settings) -> anyhow::Result<Arc<dyn Provider>> {
    match settings.llm_provider {
        LlmProvider::Offline => {
            if settings.llm_fallback_base_url.is_some() || settings.llm_fallback_model.is_some() {
                bail!(
                    "QUESTD_LLM_FALLBACK_BASE_URL and QUESTD_LLM_FALLBACK_MODEL need QUESTD_LLM_PROVIDER=openai"
                )
            }
            let latency = settings.offline_latency();
            if !latency.is_zero() {
                tracing::info!(
                    latency_ms = settings.offline_latency_ms,
                    "the offline game master waits before each answer"
                );
            }
            Ok(Arc::new(OfflineGameMaster::with_latency(latency)))
        }
        LlmProvider::Openai => {
            let present = |v: &Option<String>| {
                v.as_deref()
                    .filter(|s| !s.trim().is_empty())
                    .map(str::to_owned)
            };
            let Some(base_url) = present(&settings.llm_base_url) else {
                bail!(
                    "QUESTD_LLM_PROVIDER=openai needs QUESTD_LLM_BASE_URL (--llm-base-url), e.g. http://127.0.0.1:11434/v1"
                )
            };
            let Some(model) = present(&settings.llm_model) else {
                bail!("QUESTD_LLM_PROVIDER=openai needs QUESTD_LLM_MODEL (--llm-model)")
            };
            let provider = openai(settings, base_url, model, settings.llm_api_key.as_ref())
                .context("configuring the openai provider")?;
            tracing::info!(?provider, "using an openai-compatible model");
            let fallback_url = present(&settings.llm_fallback_base_url);
            let fallback_model = present(&settings.llm_fallback_model);
            match (fallback_url, fallback_model) {
                (None, None) => Ok(Arc::new(provider)),
                (Some(url), Some(model)) => {
                    let key = settings.llm_fallback_api_key.as_ref();
                    let fallback = openai(settings, url, model, key)
                        .context("configuring the fallback model")?;
                    tracing::info!(?fallback, "a fallback model answers when the first fails");
                    Ok(Arc::new(WithFallback::new(
                        Arc::new(provider),
                        Arc::new(fallback),
                    )))
                }
                (Some(_), None) => bail!(
                    "QUESTD_LLM_FALLBACK_BASE_URL needs QUESTD_LLM_FALLBACK_MODEL (--llm-fallback-model)"
                ),
                (None, Some(_)) => bail!(
                    "QUESTD_LLM_FALLBACK_MODEL needs QUESTD_LLM_FALLBACK_BASE_URL (--llm-fallback-base-url)"
                ),
            }
        }
    }
}

/// The token budgets of the settings (contract §12), counted under the
/// node's configured id (`local` without one, so that a restart keeps
/// its count); none for a model whose tokens cost nothing.
pub fn budgets_from(settings: &Settings, provider: &dyn Provider, store: &Store) -> Budgets {
    if !provider.budgeted() {
        return Budgets::off();
    }
    let limits = crate::budget::Limits {
        session: settings.budget_session_tokens,
        tenant: settings.budget_tenant_tokens,
        node: settings.budget_node_tokens,
    };
    let node = settings.node_id.as_deref().unwrap_or("local");
    Budgets::new(limits, node, store.clone())
}

/// An OpenAI-compatible model at `base_url` named `model`, with the
/// settings' stream, timeout and tool mode.
fn openai(
    settings: &Settings,
    base_url: String,
    model: String,
    key: Option<&crate::config::Secret>,
) -> Result<OpenAiProvider, crate::llm::LlmError> {
    let key = key.map(|k| k.expose().to_owned());
    let provider = OpenAiProvider::new(base_url, model, key, settings.llm_stream)?
        .with_call_timeout(settings.llm_timeout());
    Ok(if settings.llm_tool_mode == ToolMode::Json {
        provider.with_json_contract()
    } else {
        provider
    })
}

impl Application {
    /// Builds with the model named in the settings.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let provider = provider_from(&settings)?;
        Self::build_with(settings, provider).await
    }

    /// Builds with a given model (tests pass a scripted one).
    pub async fn build_with(
        settings: Settings,
        provider: Arc<dyn Provider>,
    ) -> anyhow::Result<Self> {
        let metrics = Arc::new(Metrics::default());
        let node = Node {
            id: settings
                .node_id
                .clone()
                .unwrap_or_else(|| format!("node-{}", crate::session::random_token(8)))
                .into(),
            lease: Duration::from_millis(settings.lease_ms),
            db_timeout: Duration::from_millis(settings.database_timeout_ms),
        };
        if node.id.is_empty() || node.id.len() > 64 || node.id.chars().any(char::is_control) {
            bail!("QUESTD_NODE_ID must be 1 to 64 printable characters");
        }
        tracing::info!(node_id = %node.id, "this node");
        let store = Store::open_with(
            &settings.database_url,
            metrics.clone(),
            settings.database_max_mb,
            node,
        )
        .await
        .with_context(|| {
            format!(
                "opening {}",
                crate::backup::without_secrets(&settings.database_url)
            )
        })?;
        let registry = Arc::new(
            Registry::builtin_with(&settings.disabled_tools(), settings.tool_timeout())
                .map_err(anyhow::Error::msg)?,
        );
        let builtin_starts = Campaign::builtin_starts(registry.names())
            .map_err(|e| anyhow::anyhow!("a built-in campaign is broken: {e}"))?;
        let budgets = Arc::new(budgets_from(&settings, &*provider, &store));
        budgets
            .load(None, None)
            .await
            .context("reading the node's token spending")?;
        let deps = Arc::new(SessionDeps {
            store: store.clone(),
            registry: registry.clone(),
            provider: provider.clone(),
            limits: Arc::new(Limits::from_settings(&settings)),
            metrics: metrics.clone(),
            budgets: budgets.clone(),
        });
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // Sessions run on the HTTP workers' threads unless they are given
        // threads of their own (`placement`).
        let (placement, arbiters, on_workers) = match settings.session_threads {
            Some(threads) => {
                let (placement, arbiters) = Placement::own_threads(threads.max(1));
                (placement, arbiters, false)
            }
            None => (Placement::default(), Vec::new(), true),
        };
        let quotas = Quotas {
            max_sessions: settings.max_sessions,
            per_tenant: settings.tenant_session_quota(),
            max_state_bytes: settings.max_live_state_mb.saturating_mul(1024 * 1024),
        };
        let retention = settings.anonymous_retention();
        let hub = SessionHub::new(deps, placement.clone(), quotas, retention).start();
        let keys = Keys::parse(
            settings.internal_api_key.as_ref(),
            settings.tenant_keys.as_ref(),
        )
        .map_err(anyhow::Error::msg)?;
        if !keys.any() {
            tracing::info!(
                "no key configured: the tool API, MCP and other services' calls are refused \
                 (set QUESTD_INTERNAL_API_KEY or QUESTD_TENANT_KEYS)"
            );
        }
        let max_connections = connection_budget(settings.max_connections);
        let admission = Admission::new(&settings, max_connections).map_err(anyhow::Error::msg)?;
        let accept = Arc::new(Accept::new(&settings, max_connections).map_err(anyhow::Error::msg)?);
        let http_workers = settings.http_workers.unwrap_or(cores).max(1);
        let guard = Arc::new(GuardRules::from_settings(&settings)?);

        let listener =
            listen(&settings.bind).with_context(|| format!("binding {}", settings.bind))?;
        let port = listener.local_addr()?.port();
        let bound = listener.local_addr()?;
        let node_url = settings.node_url.clone().unwrap_or_else(|| {
            let host = if bound.ip().is_unspecified() {
                std::net::IpAddr::from([127, 0, 0, 1])
            } else {
                bound.ip()
            };
            format!("http://{}", SocketAddr::new(host, port))
        });
        if store.is_shared() && settings.node_url.is_none() && bound.ip().is_unspecified() {
            tracing::warn!(
                node_url = %node_url,
                "QUESTD_NODE_URL is not set: other nodes reach this one at a loopback address"
            );
        }
        let chat_wait = http::state::chat_wait(settings.turn_deadline());
        let owner_wait = chat_wait.max(http::locate::SESSION_WAIT);
        let cluster = Cluster::join(&store, node_url.trim_end_matches('/'), owner_wait)
            .await
            .context("joining the nodes of the database")?;
        let admission = admission.with_cluster(cluster.clone());
        let report =
            http::cluster::audience_report(store.clone(), cluster.clone(), store.node().id.clone());
        let tails = Tails::new(
            store.clone(),
            metrics.clone(),
            report,
            placement.clone(),
            settings.max_sessions,
        )
        .start();
        let listener_task = actix_web::rt::spawn(tail::listen(store.clone(), tails.clone()));
        let service = ServiceState::new(
            settings.service_per_minute,
            settings.service_burst,
            &registry,
        );
        let data = web::Data::new(AppState {
            hub: hub.clone(),
            tails: tails.clone(),
            sites: Arc::new(crate::sites::Sites::new(store.clone())),
            store: store.clone(),
            cluster,
            registry,
            builtin_starts,
            provider,
            budgets,
            history_tokens: settings.history_tokens,
            max_iterations: settings.max_iterations.max(1),
            chat_wait,
            mcp_sessions: McpSessions::default(),
            metrics,
            service,
            keys,
            admission,
            metrics_key: settings.metrics_key.clone(),
            ws: http::ws::WsLimits::from_settings(&settings),
            max_players: settings.max_players,
            max_save_bytes: usize::try_from(settings.max_save_mb.saturating_mul(1024 * 1024))
                .unwrap_or(usize::MAX),
            min_invite_expires_s: settings.min_invite_expires_s,
            openapi: std::sync::OnceLock::new(),
        });
        let on_worker = move || {
            if on_workers {
                placement.register_current();
            }
        };
        let options = http::server::Options {
            workers: http_workers,
            per_worker: max_connections.div_ceil(http_workers).max(1),
            shutdown_grace_secs: SHUTDOWN_GRACE_SECS,
        };
        let server = http::server::serve(listener, options, accept, on_worker, move || {
            App::new()
                .app_data(data.clone())
                .wrap(actix_web::middleware::from_fn(http::cluster::hand_over))
                .wrap(actix_web::middleware::from_fn(http::refuse_nul_in_url))
                .wrap(Arc::clone(&guard).middleware())
                .wrap(actix_web::middleware::from_fn(http::accept::head_seen))
                .configure(http::configure)
                .default_service(web::to(http::no_route))
        })?;
        tracing::info!(
            addr = %settings.bind,
            port,
            session_threads = ?settings.session_threads,
            max_connections,
            max_sessions = settings.max_sessions,
            "questd listening"
        );
        Ok(Self {
            port,
            server,
            hub,
            tails,
            store,
            listener_task,
            arbiters,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn hub(&self) -> Addr<SessionHub> {
        self.hub.clone()
    }

    /// Handle to stop the server gracefully.
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until SIGTERM or Ctrl-C, then drains: no new sessions here,
    /// every session finishes the work it took, closes its connections
    /// with 1012 and unloads, its claim released so another node takes it
    /// at once; then the server stops.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        use actix_web::rt::signal::unix::{SignalKind, signal};
        let handle = self.server.handle();
        let hub = self.hub.clone();
        let tails = self.tails.clone();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        actix_web::rt::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tails.do_send(DrainTails);
            let _ = hub
                .send(DrainNode {
                    within: DRAIN_WITHIN,
                })
                .await;
            tracing::info!("drained; stopping");
            handle.stop(true).await;
        });
        self.run_until_stopped().await
    }

    /// Serves until the server is stopped (the handle), then waits for its
    /// sessions to stop and for every write they queued to be committed:
    /// once this returns, the database holds all this server will write.
    ///
    /// The session arbiters stop with it, also when this future is dropped
    /// unfinished (its runtime shutting down), so no session outlives its
    /// server holding database connections.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let arbiters = StopOnDrop(self.arbiters);
        let served = self.server.await;
        self.listener_task.abort();
        let _ = self.listener_task.await;
        // Sessions on the HTTP workers' threads stopped with them; those on
        // threads of their own stop now.
        arbiters.stop();
        let began = std::time::Instant::now();
        let _ = self.hub.send(StopHub).await;
        while self.hub.connected() {
            actix_web::rt::time::sleep(Duration::from_millis(5)).await;
        }
        let sessions_ms = began.elapsed().as_millis();
        self.store.settled().await;
        tracing::info!(
            sessions_ms,
            writes_ms = began.elapsed().as_millis() - sessions_ms,
            "stopped: the sessions are gone and what they queued is committed"
        );
        served
    }
}

/// Stops its arbiters when dropped.
struct StopOnDrop(Vec<ArbiterHandle>);

impl StopOnDrop {
    fn stop(&self) {
        for a in &self.0 {
            a.stop();
        }
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Cli;
    use clap::Parser;

    #[tokio::test(start_paused = true)]
    async fn the_offline_latency_reaches_the_game_master() {
        use futures_util::StreamExt;
        let settings = Cli::parse_from(["questd", "--offline-latency-ms", "80"]).settings;
        let provider = provider_from(&settings).ok();
        let Some(provider) = provider else {
            panic!("the offline provider builds");
        };
        assert_eq!(provider.name(), "offline");
        let request = crate::llm::ModelRequest {
            system: String::new(),
            messages: vec![Arc::new(crate::game::HistoryEntry::User {
                turn_id: "turn_1".into(),
                text: "hello".into(),
                seat_id: None,
            })],
            tools: Default::default(),
            context: Arc::default(),
            kind: crate::llm::RequestKind::Step,
            results: Vec::new(),
            fallback: false,
        };
        // On a paused clock the answer waited exactly the setting.
        let began = tokio::time::Instant::now();
        let events: Vec<_> = provider.complete(request).collect().await;
        assert!(!events.is_empty());
        assert_eq!(began.elapsed(), std::time::Duration::from_millis(80));
    }

    #[test]
    fn openai_needs_a_base_url_and_a_model() {
        let parse = |args: &[&str]| {
            let mut all = vec!["questd", "--llm-provider", "openai"];
            all.extend_from_slice(args);
            Cli::parse_from(all).settings
        };
        let err = |s: &Settings| {
            provider_from(s)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&parse(&["--llm-model", "m"])).contains("QUESTD_LLM_BASE_URL"));
        assert!(
            err(&parse(&["--llm-base-url", "http://127.0.0.1:1/v1"])).contains("QUESTD_LLM_MODEL")
        );
        let ok = parse(&[
            "--llm-base-url",
            "http://127.0.0.1:1/v1",
            "--llm-model",
            "m",
        ]);
        assert_eq!(
            provider_from(&ok)
                .map(|p| p.name().to_owned())
                .ok()
                .as_deref(),
            Some("openai")
        );
        // A fallback needs both its URL and its model, and a first model
        // to stand in for.
        let both = [
            "--llm-base-url",
            "http://127.0.0.1:1/v1",
            "--llm-model",
            "m",
        ];
        let with = |extra: &[&str]| {
            let mut args = both.to_vec();
            args.extend_from_slice(extra);
            parse(&args)
        };
        let url = ["--llm-fallback-base-url", "http://127.0.0.1:2/v1"];
        let model = ["--llm-fallback-model", "small"];
        assert!(err(&with(&url)).contains("QUESTD_LLM_FALLBACK_MODEL"));
        assert!(err(&with(&model)).contains("QUESTD_LLM_FALLBACK_BASE_URL"));
        let fallback = with(&[url, model].concat());
        let provider = provider_from(&fallback).expect("a model with a fallback");
        assert_eq!((provider.name(), provider.model()), ("openai", "m"));
        let offline = Cli::parse_from(["questd", "--llm-fallback-model", "small"]).settings;
        assert!(err(&offline).contains("QUESTD_LLM_PROVIDER=openai"));
    }
}
