//! The HTTP server around the application: actix-server's workers, each
//! with actix-http's HTTP/1 service over the application, the same as
//! actix-web's `HttpServer` builds it (the same timeouts), plus the one
//! thing `HttpServer` cannot be given: a service for upgrades (`upgrade`),
//! which takes each WebSocket's socket out of the HTTP dispatcher.

use std::any::Any;
use std::net::TcpListener;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_http::body::MessageBody;
use actix_http::{HttpService, KeepAlive, Request};
use actix_service::{IntoServiceFactory, ServiceFactory, fn_factory, fn_service, map_config};
use actix_web::dev::{AppConfig, Server, ServiceResponse};
use tokio::net::TcpStream;

use super::accept::Accept;

/// How the server runs.
pub struct Options {
    pub workers: usize,
    /// Connections each worker holds at most.
    pub per_worker: usize,
    /// How long a stop waits for open connections.
    pub shutdown_grace_secs: u64,
}

/// Starts serving `listener` with the application `app` makes (once per
/// worker, twice: once for requests, once for upgrades); `on_worker` runs
/// on each worker's thread as it starts.
pub fn serve<F, A, S, B>(
    listener: TcpListener,
    options: Options,
    accept: Arc<Accept>,
    on_worker: impl Fn() + Clone + Send + 'static,
    app: F,
) -> std::io::Result<Server>
where
    F: Fn() -> A + Clone + Send + 'static,
    A: IntoServiceFactory<S, Request>,
    S: ServiceFactory<
            Request,
            Config = AppConfig,
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: MessageBody + 'static,
{
    let addr = listener.local_addr()?;
    Ok(Server::build()
        .workers(options.workers)
        // Each worker stops accepting past its share of the budget, so the
        // process keeps files for its database whatever arrives.
        .max_concurrent_connections(options.per_worker)
        // Open WebSockets would otherwise hold a shutdown for 30 s; clients
        // reconnect and resume anyway.
        .shutdown_timeout(options.shutdown_grace_secs)
        // SIGTERM and Ctrl-C drain the node first (`run_until_signalled`).
        .disable_signals()
        .listen("questd", listener, move || {
            on_worker();
            let accept = accept.clone();
            let upgrades = app.clone();
            let upgrade = fn_factory(move || {
                let app = upgrades().into_factory();
                async move {
                    let service = Rc::new(app.new_service(AppConfig::default()).await?);
                    Ok::<_, ()>(fn_service(move |(req, framed)| {
                        super::upgrade::serve(service.clone(), req, framed)
                    }))
                }
            });
            HttpService::build()
                // actix-web's `HttpServer` defaults.
                .keep_alive(KeepAlive::default())
                .client_request_timeout(Duration::from_secs(5))
                .client_disconnect_timeout(Duration::from_secs(1))
                .h1_allow_half_closed(true)
                .local_addr(addr)
                // Every socket gets its write-stall timeout and its
                // address's count before a byte of it is read.
                .on_connect_ext(move |io: &TcpStream, data| accept.on_connect(io as &dyn Any, data))
                .upgrade(upgrade)
                .finish(map_config(app().into_factory(), |_| AppConfig::default()))
                .tcp()
        })?
        .run())
}
