//! How every area registers its routes: through [`on`], which records each
//! (method, path) so the OpenAPI document can be checked against the routes
//! the server really has.

use actix_web::web;

/// Every route a `configure` registered, as (method, path pattern): what
/// the OpenAPI document's tests compare it with (actix-web lists none).
static REGISTERED: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A route for `method` on `path` (the whole path, scope included),
/// recorded in [`registered`]. Every `configure` builds its routes here.
pub(crate) fn on(method: actix_web::http::Method, path: &str) -> actix_web::Route {
    let mut seen = REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.insert((method.to_string(), path.to_owned()));
    web::method(method)
}

/// Registers `handler` for `method` on `path` through [`on`].
pub(crate) fn add<F, Args>(
    cfg: &mut web::ServiceConfig,
    method: actix_web::http::Method,
    path: &str,
    handler: F,
) where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    cfg.route(path, on(method, path).to(handler));
}

/// The routes registered so far (by every `configure` run in this process).
pub fn registered() -> std::collections::BTreeSet<(String, String)> {
    REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// A `GET` route whose answer goes out compressed when the client asks for
/// it and it is large enough (`compress`): what the page reads (and a
/// snapshot can be large). Another method on its path is answered as a
/// path with no route is (`404` with a JSON body, docs/protocol.md §1.1),
/// not with the resource's bare `405`.
pub fn read<F, Args>(cfg: &mut web::ServiceConfig, path: &str, handler: F)
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    cfg.service(
        web::resource(path)
            .wrap(actix_web::middleware::from_fn(super::compress::compress))
            .route(on(actix_web::http::Method::GET, path).to(handler))
            .default_service(web::to(super::errors::no_route)),
    );
}
