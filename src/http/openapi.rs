//! The OpenAPI 3.1 document of the HTTP API, `GET /api/v1/openapi.json`:
//! made by utoipa from the `#[utoipa::path]` of each handler and the types
//! they answer with, plus the schemas the server only has at run time (the
//! inline campaign's and each tool's input).

use std::collections::BTreeSet;

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};
use utoipa::OpenApi;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::state::AppState;
use crate::error::ErrorCode;
use crate::game::Campaign;
use crate::protocol::http::ErrorBody;
use crate::tools::Registry;

/// Where the document is served.
pub const PATH: &str = "/api/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "questd",
        description = "Hosts many AI game-master sessions at once and streams them over \
                       WebSockets. The wire contract is docs/protocol.md; errors are `ErrorBody`."
    ),
    paths(
        super::api::healthz,
        super::api::metrics,
        super::api::campaigns,
        super::api::create_session,
        super::api::list_sessions,
        super::api::get_session,
        super::api::actions,
        super::api::audit,
        super::api::activate_npc,
        super::saves::export,
        super::saves::import,
        super::admin::sessions,
        super::admin::node,
        super::admin::story,
        super::admin::audit,
        super::admin::timers,
        super::admin::close,
        super::chat::chat,
        super::party::create_invite,
        super::party::join,
        super::party::seats,
        super::party::kick,
        super::party::leave,
        super::party::make_host,
        super::party::mode,
        super::timers::cancel,
        super::approvals::decide,
        super::stateless::chat,
        super::tools_api::list,
        super::tools_api::call,
        super::tools_api::trace,
        super::sites::put,
        super::sites::get,
        super::ws::connect,
        super::mcp::post,
        super::mcp::delete,
        openapi_json,
    ),
    components(schemas(ErrorBody<'static>, ErrorCode)),
    modifiers(&SecuritySchemes)
)]
struct ApiDoc;

/// The ways to authenticate (docs/protocol.md §1.1).
struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |about: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(about))
                    .build(),
            )
        };
        components.add_security_scheme(
            "player_token",
            bearer("A session's player or spectator token (`?token=` also works on a GET)"),
        );
        components.add_security_scheme(
            "internal_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Internal-API-Key",
                "The internal key or a tenant's key (a service calling questd)",
            ))),
        );
        components.add_security_scheme(
            "metrics_key",
            bearer("`QUESTD_METRICS_KEY`, when it is set"),
        );
    }
}

/// Routes the document leaves out on purpose: the page's files (HTML,
/// scripts) and the route only peers reach (to anyone else it does not
/// exist).
pub fn left_out(method: &str, path: &str) -> bool {
    (method == "GET" && super::static_files::is_page(path))
        || path == super::cluster::AUDIENCE_ROUTE
}

/// (METHOD, path) of every operation in a document.
pub fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in item.as_object().into_iter().flatten().map(|(m, _)| m) {
            ops.insert((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

/// The tool API's other prefixes (docs/protocol.md §1.12): the same endpoints as
/// under `/api/v1`, documented under each path they are served at, each
/// with an operation id of its own (`call_api` for `/api/tools/call`,
/// `call_root` for `/tools/call`).
fn tool_aliases(paths: &mut serde_json::Map<String, Value>) {
    for name in ["list", "call"] {
        let Some(item) = paths.get(&format!("/api/v1/tools/{name}")).cloned() else {
            continue;
        };
        for prefix in super::tools_api::TOOL_API_PREFIXES {
            let path = format!("{prefix}/tools/{name}");
            if paths.contains_key(&path) {
                continue;
            }
            let mut alias = item.clone();
            let at = match prefix.trim_start_matches('/') {
                "" => "root".to_owned(),
                p => p.replace('/', "_"),
            };
            if let Some(op) = alias.get_mut("post").and_then(Value::as_object_mut) {
                op.insert("operationId".into(), json!(format!("{name}_{at}")));
            }
            paths.insert(path, alias);
        }
    }
}

/// The whole document: the derived one, the tool API under each of its
/// prefixes, the inline campaign's schema (`Campaign`) and each tool's
/// input schema (`tool.<name>`), which the server holds at run time.
pub fn document(registry: &Registry) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        tool_aliases(paths);
    }
    let schemas = &mut doc["components"]["schemas"];
    let mut campaign = Campaign::schema().clone();
    if let Some(c) = campaign.as_object_mut() {
        c.remove("$schema");
    }
    schemas["Campaign"] = campaign;
    schemas["NewSession"]["properties"]["campaign"] = json!({
        "description": "A whole inline campaign; wins over `campaign_id`.",
        "$ref": "#/components/schemas/Campaign"
    });
    for name in registry.names() {
        if let Some(spec) = registry.spec(name) {
            schemas[format!("tool.{name}")] = spec.input_schema.clone();
        }
    }
    doc
}

/// The OpenAPI document of this API. It describes, never reveals: no
/// credential needed.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "health",
    responses((status = 200, description = "This document", body = Object)))]
async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    let body = state
        .openapi
        .get_or_init(|| document(&state.registry).to_string().into());
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body.clone())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::routes::read(cfg, PATH, openapi_json);
}

#[cfg(test)]
mod tests {
    use actix_web::App;

    use super::*;

    #[actix_web::test]
    async fn every_route_the_server_has_is_documented_and_no_other() {
        let _app =
            actix_web::test::init_service(App::new().configure(super::super::configure)).await;
        let registry = Registry::builtin().expect("the built-in tools load");
        let doc = operations(&document(&registry));
        let registered: BTreeSet<_> = super::super::registered()
            .into_iter()
            .filter(|(method, path)| !left_out(method, path))
            .collect();
        assert!(registered.len() > 25, "{registered:?}");
        let missing: Vec<_> = registered.difference(&doc).collect();
        assert!(
            missing.is_empty(),
            "routes not in the document: {missing:?}"
        );
        let extra: Vec<_> = doc.difference(&registered).collect();
        assert!(
            extra.is_empty(),
            "documented routes that do not exist: {extra:?}"
        );
        assert!(doc.contains(&("POST".into(), "/api/v1/sessions".into())));
        assert!(doc.contains(&("POST".into(), "/tools/call".into())));
    }

    #[test]
    fn the_new_session_schema_lists_every_link_it_sends() {
        let doc = document(&Registry::builtin().expect("the built-in tools load"));
        let schema = &doc["components"]["schemas"]["SessionCreated"];
        let links = crate::protocol::http::SessionLinks {
            ws_url: "ws://h/ws".into(),
            play_url: "http://h/p".into(),
            watch_url: "http://h/w".into(),
        };
        let keys = |v: &Value| -> BTreeSet<String> {
            v.as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect()
        };
        let sent = keys(&serde_json::to_value(&links).unwrap_or_default());
        let described = keys(&doc["components"]["schemas"]["SessionLinks"]["properties"]);
        assert_eq!(sent, described);
        assert!(sent.len() == 5 && sent.contains("player_url"));
        assert_eq!(
            schema["allOf"][0]["$ref"],
            "#/components/schemas/SessionLinks"
        );
        assert_eq!(doc["openapi"].as_str().map(|v| &v[..3]), Some("3.1"));
        assert!(doc["components"]["schemas"]["Campaign"]["properties"]["areas"].is_object());
    }
}
