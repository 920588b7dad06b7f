//! `GET /api/v1/openapi.json`: an OpenAPI 3.1 document of every route the
//! server has, and only of those.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::common::{Api, TEST_KEY, client, get, neighbour, request, spawn_app};

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

/// `method` on `path` (its params made up) with the test key, and `{}`
/// as the body of anything but a `GET`.
async fn keyed_call(base: &str, method: &str, path: &str) -> crate::common::Answer {
    let url = format!("{base}{}", concrete(path));
    let body = (method != "GET").then(|| json!({}));
    request(
        method,
        &url,
        &[("X-Internal-API-Key", TEST_KEY)],
        body.as_ref(),
    )
    .await
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
        let answer = keyed_call(&app.base, method, path).await;
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

    // A known path with a method it does not take is answered with a JSON
    // error (the server's "no route" 404), never a bare 405 (but /mcp,
    // whose transport answers 405 with `Allow`).
    for (_, path) in &registered {
        if path == "/mcp" {
            continue;
        }
        for method in ["GET", "POST", "PUT", "DELETE"] {
            if registered.contains(&(method.to_owned(), path.clone())) {
                continue;
            }
            let answer = keyed_call(&app.base, method, path).await;
            // Another route's pattern may take the path (GET
            // /api/v1/sessions/import is the session "import"): then its
            // handler answers, with its JSON.
            assert!(
                answer.status != 405 && answer.body["error_code"].is_string(),
                "{method} {path}: {} {}",
                answer.status,
                answer.body
            );
        }
    }

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

/// `schemas` and every schema they stand for: through `$ref`s, and every
/// part of an `allOf`, `oneOf` or `anyOf` (a union documents what any of
/// its parts does).
fn parts<'a>(doc: &'a Value, schemas: &[&'a Value]) -> Vec<&'a Value> {
    let mut out = Vec::new();
    let mut todo: Vec<&Value> = schemas.to_vec();
    while let Some(schema) = todo.pop() {
        if let Some(r) = schema["$ref"].as_str() {
            let name = r.trim_start_matches("#/components/schemas/");
            let target = &doc["components"]["schemas"][name];
            assert!(!target.is_null(), "{r} names no schema");
            todo.push(target);
        }
        for union in ["allOf", "oneOf", "anyOf"] {
            todo.extend(schema[union].as_array().into_iter().flatten());
        }
        out.push(schema);
    }
    out
}

/// Where a real answer has a key its documented schema does not name:
/// walks `value`'s objects and arrays along `schemas`. An object whose
/// schema names no property and is no map (`additionalProperties`) is
/// undocumented at the first `strict` levels; deeper it is free-form JSON
/// (a character's `stats`, a tool's output).
fn undocumented(
    doc: &Value,
    schemas: &[&Value],
    value: &Value,
    at: &str,
    strict: usize,
    out: &mut Vec<String>,
) {
    let parts = parts(doc, schemas);
    match value {
        Value::Object(fields) => {
            let mut props: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
            let mut maps = Vec::new();
            for part in &parts {
                for (name, schema) in part["properties"].as_object().into_iter().flatten() {
                    props.entry(name).or_default().push(schema);
                }
                if part["additionalProperties"].is_object() {
                    maps.push(&part["additionalProperties"]);
                }
            }
            if props.is_empty() && maps.is_empty() {
                if strict > 0 {
                    out.push(format!("{at}: an object with no documented fields"));
                }
                return;
            }
            for (key, field) in fields {
                let inner = format!("{at}.{key}");
                let next = strict.saturating_sub(1);
                match props.get(key.as_str()) {
                    Some(schemas) => undocumented(doc, schemas, field, &inner, next, out),
                    None if !maps.is_empty() => undocumented(doc, &maps, field, &inner, next, out),
                    None => out.push(inner),
                }
            }
        }
        Value::Array(items) => {
            let documented: Vec<&Value> = parts
                .iter()
                .map(|p| &p["items"])
                .filter(|i| i.is_object())
                .collect();
            if documented.is_empty() {
                if strict > 0 && !items.is_empty() {
                    out.push(format!("{at}: an array with no documented items"));
                }
                return;
            }
            for (i, item) in items.iter().enumerate() {
                undocumented(doc, &documented, item, &format!("{at}[{i}]"), strict, out);
            }
        }
        _ => {}
    }
}

/// Asserts that every key of `value` (an answer of `method path` with
/// `status`) is a property of the schema the document gives that answer.
fn assert_documented(
    doc: &Value,
    method: &str,
    path: &str,
    status: u16,
    value: &Value,
    strict: usize,
) {
    let schema = &doc["paths"][path][method]["responses"][status.to_string()]["content"]["application/json"]
        ["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} documents no {status} body"
    );
    let mut missing = Vec::new();
    undocumented(doc, &[schema], value, "$", strict, &mut missing);
    assert!(
        missing.is_empty(),
        "{} {path} ({status}) answers keys its schema lacks: {missing:?}\nin {value}",
        method.to_uppercase()
    );
}

/// Asserts that every key of `value`, a request body of `method path`, is
/// a property of the schema the document gives that body.
fn assert_request_documented(doc: &Value, method: &str, path: &str, value: &Value, strict: usize) {
    let schema =
        &doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"];
    let mut missing = Vec::new();
    undocumented(doc, &[schema], value, "$", strict, &mut missing);
    assert!(
        missing.is_empty(),
        "{method} {path} takes keys its schema lacks: {missing:?}"
    );
}

#[actix_web::test]
async fn real_answers_have_only_the_fields_their_documented_schemas_name() {
    let app = spawn_app().await;
    let (_, doc) = get(&format!("{}/api/v1/openapi.json", app.base), None).await;

    // Every operation has an id of its own.
    let mut ids = BTreeSet::new();
    for (method, path) in questd::http::openapi::operations(&doc) {
        let id = &doc["paths"][&path][method.to_lowercase()]["operationId"];
        assert!(
            ids.insert(id.to_string()),
            "{method} {path}: operationId {id} is used twice"
        );
    }

    // The snapshot: its game state, down to each area, character, zone,
    // the player and the Chinese names.
    let s = app.demo().await;
    let snapshot = app.snapshot(&s).await;
    for key in ["areas", "characters", "player", "names_zh", "owner_node"] {
        assert!(
            !snapshot[key].is_null(),
            "the snapshot has {key}: {snapshot}"
        );
    }
    assert_documented(&doc, "get", "/api/v1/sessions/{id}", 200, &snapshot, 2);

    // A whole turn over HTTP: a move, so its state patch holds areas and
    // characters.
    let target = neighbour(&snapshot);
    let ask = json!({"session_id": s.session_id, "message": format!("go to {target}"), "request_id": "r-1"});
    assert_request_documented(&doc, "post", "/api/v1/chat", &ask, 2);
    let turn = request(
        "POST",
        &format!("{}/api/v1/chat", app.base),
        &[("Authorization", &format!("Bearer {}", s.player_token))],
        Some(&ask),
    )
    .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert!(
        turn.body["state_patch"]["characters"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "{}",
        turn.body
    );
    assert_documented(&doc, "post", "/api/v1/chat", 200, &turn.body, 2);

    // The stateless chat: a conversation in, the model's next message out.
    let conversation = json!({"messages": [{"role": "user", "content": "roll 1d20"}]});
    assert_request_documented(&doc, "post", "/api/chat", &conversation, 2);
    let step = request(
        "POST",
        &format!("{}/api/chat", app.base),
        &[],
        Some(&conversation),
    )
    .await;
    assert_eq!(step.status, 200, "{}", step.body);
    assert_documented(&doc, "post", "/api/chat", 200, &step.body, 2);

    // MCP: the JSON-RPC envelopes, a result and an error (a method's
    // `result` is its own, free-form).
    let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    assert_request_documented(&doc, "post", "/mcp", &hello, 1);
    let key = [("X-Internal-API-Key", TEST_KEY)];
    let answer = request("POST", &format!("{}/mcp", app.base), &key, Some(&hello)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.body["result"].is_object(), "{}", answer.body);
    assert_documented(&doc, "post", "/mcp", 200, &answer.body, 1);
    let stray = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let refused = request("POST", &format!("{}/mcp", app.base), &key, Some(&stray)).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body["error"]["code"].is_i64(), "{}", refused.body);
    assert_documented(&doc, "post", "/mcp", 400, &refused.body, 2);
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

#[actix_web::test]
async fn a_small_answer_goes_out_as_it_is_and_a_large_one_compressed() {
    let app = spawn_app().await;
    let coding = |resp: &awc::ClientResponse<_>| {
        (
            resp.headers()
                .get("content-encoding")
                .map(|v| v.to_str().unwrap_or_default().to_owned()),
            resp.headers()
                .get_all("vary")
                .map(|v| v.to_str().unwrap_or_default().to_ascii_lowercase())
                .collect::<Vec<_>>(),
        )
    };
    // A session's creation answers a few hundred bytes: not compressed,
    // though the client would take it.
    let mut created = client()
        .post(format!("{}/api/v1/sessions", app.base))
        .insert_header(("Accept-Encoding", "br, gzip"))
        .insert_header(("X-Internal-API-Key", TEST_KEY))
        .send_json(&json!({"campaign_id": "demo"}))
        .await
        .expect("POST sends");
    assert_eq!(created.status().as_u16(), 201);
    assert_eq!(coding(&created), (None, vec!["accept-encoding".to_owned()]));
    let body: Value = created.json().await.expect("a JSON body");
    let id = body["session_id"].as_str().expect("an id").to_owned();
    let token = body["player_token"].as_str().expect("a token").to_owned();
    // Its snapshot, tens of kilobytes, is.
    let snapshot = client()
        .get(format!("{}/api/v1/sessions/{id}", app.base))
        .insert_header(("Accept-Encoding", "gzip"))
        .insert_header(("Authorization", format!("Bearer {token}")))
        .send()
        .await
        .expect("GET sends");
    assert_eq!(snapshot.status().as_u16(), 200);
    assert_eq!(
        coding(&snapshot),
        (Some("gzip".to_owned()), vec!["accept-encoding".to_owned()])
    );
    app.stop().await;
}
