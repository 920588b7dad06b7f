//! `GET /api/v1/openapi.json`: an OpenAPI 3.1 document of every route the
//! server has, and only of those.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::common::{TEST_KEY, client, get, request, spawn_app};

/// The path with each `{param}` filled in with a made-up value.
fn concrete(path: &str) -> String {
    path.replace("{id}", "no-such-session")
        .replace("{npc_id}", "no-such-npc")
        .replace("{site_id}", "no-such-site")
}

/// Whether an answer is the server's own "no route" (not a handler's 404).
fn no_route(status: u16, body: &Value) -> bool {
    status == 404
        && body["error_code"] == "NOT_FOUND"
        && body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no route for "))
}

/// The property names of a schema, through `$ref`s and `allOf`.
fn properties(doc: &Value, schema: &Value) -> BTreeSet<String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return properties(doc, &doc["components"]["schemas"][name]);
    }
    let mut names: BTreeSet<String> = schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        names.extend(properties(doc, part));
    }
    names
}

#[actix_web::test]
async fn the_document_is_openapi_3_1_and_matches_the_routes_that_exist() {
    let app = spawn_app().await;
    let (status, doc) = get(&format!("{}/api/v1/openapi.json", app.base), None).await;
    assert_eq!(status, 200, "{doc}");
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.1"), "openapi is {version:?}");

    // The server's own no-route answer, and a handler's 404, tell apart.
    let (status, body) = get(&format!("{}/api/v1/no-such-thing", app.base), None).await;
    assert!(no_route(status, &body), "{status} {body}");
    let (status, body) = get(
        &format!("{}/api/v1/sessions/no-such-session", app.base),
        Some("some-token"),
    )
    .await;
    assert!(status == 404 && !no_route(status, &body), "{status} {body}");

    // Every documented operation reaches a handler.
    let ops = questd::http::openapi::operations(&doc);
    assert!(ops.len() >= 25, "only {} operations", ops.len());
    for (method, path) in &ops {
        let url = format!("{}{}", app.base, concrete(path));
        let body = (method == "POST" || method == "PUT").then(|| json!({}));
        let answer = request(
            method,
            &url,
            &[("X-Internal-API-Key", TEST_KEY)],
            body.as_ref(),
        )
        .await;
        assert!(
            !no_route(answer.status, &answer.body),
            "{method} {path} is documented but has no route: {}",
            answer.body
        );
    }

    // Every route the server registered is documented, but the page's
    // files and the peers' route.
    let registered: BTreeSet<_> = questd::http::registered()
        .into_iter()
        .filter(|(method, path)| !questd::http::openapi::left_out(method, path))
        .collect();
    let missing: Vec<_> = registered.difference(&ops).collect();
    assert!(missing.is_empty(), "routes the document lacks: {missing:?}");
    assert!(ops.contains(&("GET".to_owned(), "/api/v1/openapi.json".to_owned())));
    assert!(!ops.iter().any(|(_, p)| p.ends_with("/audience")));

    // The schemas are the handlers' types.
    let created = &doc["paths"]["/api/v1/sessions"]["post"]["responses"]["201"]["content"]["application/json"]
        ["schema"];
    let fields = properties(&doc, created);
    for f in [
        "session_id",
        "player_token",
        "spectator_token",
        "ws_url",
        "player_url",
    ] {
        assert!(fields.contains(f), "{f} not in {fields:?}");
    }
    let asked = &doc["paths"]["/api/v1/sessions"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    let fields = properties(&doc, asked);
    assert!(
        fields.contains("campaign_id") && fields.contains("campaign"),
        "{fields:?}"
    );
    let call = &doc["paths"]["/tools/call"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    let fields = properties(&doc, call);
    assert!(
        fields.contains("tool_name") && fields.contains("input"),
        "{fields:?}"
    );
    let campaign = &doc["components"]["schemas"]["Campaign"];
    assert!(
        campaign["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("areas")))
    );
    let tools = doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| k.starts_with("tool.") && v["type"] == "object")
        .count();
    assert!(tools > 5, "{tools} tool input schemas");
    let errors = properties(&doc, &doc["components"]["schemas"]["ErrorBody"]);
    assert!(errors.contains("error_code") && errors.contains("message"));
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["internal_key"]["name"], "X-Internal-API-Key");
    assert_eq!(schemes["player_token"]["scheme"], "bearer");
    assert_eq!(schemes["metrics_key"]["scheme"], "bearer");
    app.stop().await;
}

#[actix_web::test]
async fn the_document_goes_out_compressed_when_asked() {
    let app = spawn_app().await;
    let resp = client()
        .get(format!("{}/api/v1/openapi.json", app.base))
        .insert_header(("Accept-Encoding", "gzip"))
        .send()
        .await
        .expect("GET sends");
    assert_eq!(resp.status().as_u16(), 200);
    let coding = resp
        .headers()
        .get("content-encoding")
        .map(|v| v.to_str().unwrap_or_default());
    assert_eq!(coding, Some("gzip"));
    app.stop().await;
}
