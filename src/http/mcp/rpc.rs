//! The JSON-RPC envelope of MCP: what a client sends ([`Incoming`], checked
//! field by field), what the server answers ([`RpcAnswer`], or an
//! [`RpcError`] with its HTTP status), and how (JSON, or a short event
//! stream when the client's `Accept` allows it).

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{HttpResponse, web};
use std::convert::Infallible;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::http::body::body_bytes;
use crate::http::errors::status_of;
use crate::tools::cut_name;

pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
pub(super) const METHOD_NOT_FOUND: i64 = -32601;
pub(super) const INVALID_PARAMS: i64 = -32602;
pub(super) const INTERNAL_ERROR: i64 = -32603;
/// A mirror header disagrees with the body (2026-07-28).
pub(super) const HEADER_MISMATCH: i64 = -32020;
/// The request names a protocol version the server does not speak.
pub(super) const UNSUPPORTED_VERSION: i64 = -32022;

// ----- the JSON-RPC envelope -------------------------------------------------

/// One JSON-RPC message as a client sends it (MCP carries one per
/// request). Read as it comes, then checked field by field into an
/// [`Incoming`], so each problem gets its own error.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(super) struct Envelope {
    /// Must be `"2.0"`.
    #[serde(default)]
    #[schema(value_type = String)]
    pub(super) jsonrpc: Option<Value>,
    /// A string or a number; absent from a notification.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Value>)]
    pub(super) id: Option<Value>,
    /// The method (`initialize`, `ping`, `server/discover`, `tools/list`,
    /// `tools/call`, notifications); absent from a client's response.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub(super) method: Option<Value>,
    /// The method's arguments, as the method defines them (a tool call's
    /// `name` and `arguments`, `_meta`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(super) params: Option<Value>,
    /// A client's response to a server request (the server sends none).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub(super) result: Option<Value>,
    /// A client's error response to a server request.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub(super) error: Option<Value>,
}

/// A field that is present, `null` included (serde reads a `null` into
/// an `Option` as absent; JSON-RPC tells them apart).
pub(super) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// One JSON-RPC message from a client, checked for shape.
#[derive(Debug)]
pub(super) struct Incoming {
    /// `None` for a notification.
    pub(super) id: Option<Value>,
    /// `None` for a response to a server request.
    pub(super) method: Option<String>,
    pub(super) params: Map<String, Value>,
}

impl Incoming {
    /// Parses a body; a failure comes with the id to answer it under.
    pub(super) fn parse(body: &[u8]) -> Result<Self, (Value, RpcError)> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            (
                Value::Null,
                RpcError::bad_request(PARSE_ERROR, format!("the body is not valid JSON: {e}")),
            )
        })?;
        let invalid = |id: &Value, message: &str| {
            Err((id.clone(), RpcError::bad_request(INVALID_REQUEST, message)))
        };
        if let Some(at) = crate::json::find_nul(&value) {
            // Answered under the message's id when that id is usable
            // (a number, or a string without the NUL).
            let id = match value.get("id") {
                Some(id @ Value::Number(_)) => id.clone(),
                Some(id @ Value::String(s)) if !s.contains('\0') => id.clone(),
                _ => Value::Null,
            };
            return invalid(&id, &format!("the body is refused: {at}"));
        }
        let envelope = match value {
            Value::Object(_) => match Envelope::deserialize(value) {
                Ok(envelope) => envelope,
                Err(_) => return invalid(&Value::Null, "the body is not a JSON-RPC message"),
            },
            Value::Array(_) => {
                return invalid(
                    &Value::Null,
                    "JSON-RPC batches are not part of MCP; send one message per request",
                );
            }
            _ => {
                return invalid(
                    &Value::Null,
                    "the body must be one JSON-RPC message (an object)",
                );
            }
        };
        let id = match envelope.id {
            None => None,
            Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
            Some(_) => return invalid(&Value::Null, "id must be a string or a number"),
        };
        let shown = id.clone().unwrap_or(Value::Null);
        if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some(JSONRPC) {
            return invalid(&shown, "jsonrpc must be \"2.0\"");
        }
        let method = match envelope.method {
            Some(Value::String(m)) => Some(m),
            Some(_) => return invalid(&shown, "method must be a string"),
            None if id.is_some() && (envelope.result.is_some() || envelope.error.is_some()) => None,
            None => return invalid(&shown, "method is missing"),
        };
        let params = match envelope.params {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => return invalid(&shown, "params must be an object"),
        };
        Ok(Self { id, method, params })
    }

    /// `params._meta`, when it is an object.
    pub(super) fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta").and_then(Value::as_object)
    }
}

/// A JSON-RPC error and the HTTP status it is sent with.
#[derive(Debug)]
pub(super) struct RpcError {
    pub(super) status: StatusCode,
    pub(super) code: i64,
    pub(super) message: String,
    pub(super) data: Option<Value>,
}

impl RpcError {
    pub(super) fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An error in the envelope or headers: HTTP 400.
    pub(super) fn bad_request(code: i64, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(super) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The JSON-RPC error answering `id` (`null` when unknown).
    pub(super) fn body(&self, id: &Value) -> RpcAnswer {
        RpcAnswer {
            jsonrpc: JSONRPC,
            id: id.clone(),
            result: None,
            error: Some(RpcErrorObject {
                code: self.code,
                message: self.message.clone(),
                data: self.data.clone(),
            }),
        }
    }

    pub(super) fn response(&self, id: &Value) -> HttpResponse {
        json_response(self.status, &self.body(id))
    }
}

pub(super) fn unknown_session(session_id: &str) -> RpcError {
    let shown = cut_name(session_id);
    RpcError::new(
        StatusCode::NOT_FOUND,
        INVALID_REQUEST,
        format!("no MCP session {shown:?}: it ended or expired; send initialize again"),
    )
}

/// A failure of the service core (context headers, key, rate) as an HTTP
/// error with a JSON-RPC body; `data.error_code` is the questd code.
pub(super) fn api_error(e: ApiError, id: &Value) -> HttpResponse {
    let retry_after_s = e.retry_after_s;
    let mut resp = rpc_error_of(e).response(id);
    if let Some(s) = retry_after_s
        && let Ok(value) = header::HeaderValue::from_str(&s.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, value);
    }
    resp
}

/// [`api_error`] as the body of an answer already under way (a call's).
pub(super) fn api_error_body(e: ApiError, id: &Value) -> RpcAnswer {
    rpc_error_of(e).body(id)
}

/// An HTTP error as a JSON-RPC error: its code and extra fields in `data`.
pub(super) fn rpc_error_of(e: ApiError) -> RpcError {
    let status = status_of(e.code);
    let code = if status.is_server_error() {
        INTERNAL_ERROR
    } else {
        INVALID_REQUEST
    };
    let mut data = Map::new();
    data.insert("error_code".into(), json!(e.code));
    if let Some(extra) = e.extra {
        data.extend(extra);
    }
    if let Some(s) = e.retry_after_s {
        data.insert("retry_after_s".into(), json!(s));
    }
    RpcError::new(status, code, e.message).with_data(Value::Object(data))
}

/// The JSON-RPC version every message names.
pub(super) const JSONRPC: &str = "2.0";

/// The server's answer to one request: its `result`, or its `error`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RpcAnswer {
    /// Always `"2.0"`.
    pub(super) jsonrpc: &'static str,
    /// The request's id (a string or a number); `null` when the request
    /// could not be read far enough to find it.
    #[schema(value_type = Value)]
    pub(super) id: Value,
    /// The method's result, as the method defines it (`tools/list`'s
    /// `tools`, `tools/call`'s `content` and `isError`, …); absent from an
    /// error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub(super) result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<RpcErrorObject>,
}

/// A JSON-RPC error: its code, its message and, for a questd error, its
/// `error_code` and extra fields in `data`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RpcErrorObject {
    pub(super) code: i64,
    pub(super) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub(super) data: Option<Value>,
}

pub(super) fn rpc_result(id: &Value, result: Value) -> RpcAnswer {
    RpcAnswer {
        jsonrpc: JSONRPC,
        id: id.clone(),
        result: Some(result),
        error: None,
    }
}

pub(super) fn json_response(status: StatusCode, body: &impl Serialize) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json")
        .body(serde_json::to_string(body).unwrap_or_default())
}

pub(super) fn sse_event(message: &impl Serialize) -> Bytes {
    let message = serde_json::to_string(message).unwrap_or_default();
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

pub(super) fn sse_response(
    events: impl futures_util::Stream<Item = Result<Bytes, Infallible>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(events)
}

/// Which answer formats the client's `Accept` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Accepts {
    pub(super) json: bool,
    pub(super) sse: bool,
}

impl Accepts {
    /// No `Accept` allows JSON; `*/*` and `application/*` allow JSON but not
    /// a stream, which only an explicit `text/event-stream` allows.
    pub(super) fn of(headers: &HeaderMap) -> Self {
        let mut accepts = Self {
            json: false,
            sse: false,
        };
        let mut any = false;
        for value in headers.get_all(header::ACCEPT) {
            let Ok(value) = value.to_str() else { continue };
            for part in value.split(',') {
                any = true;
                let mut pieces = part.split(';');
                let media = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
                let refused = pieces.any(|p| {
                    let p = p.trim().to_ascii_lowercase();
                    p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
                });
                if refused {
                    continue;
                }
                match media.as_str() {
                    "application/json" | "application/*" | "*/*" => accepts.json = true,
                    "text/event-stream" => accepts.sse = true,
                    _ => {}
                }
            }
        }
        if !any {
            accepts.json = true;
        }
        accepts
    }

    /// A successful answer to `id` in the format the client allows.
    pub(super) fn reply(&self, id: &Value, result: Value) -> HttpResponse {
        self.send(rpc_result(id, result))
    }

    /// One whole JSON-RPC message: JSON when allowed, else one SSE event.
    pub(super) fn send(&self, message: RpcAnswer) -> HttpResponse {
        if self.json {
            json_response(StatusCode::OK, &message)
        } else {
            let event = sse_event(&message);
            sse_response(futures_util::stream::once(async move {
                Ok::<_, Infallible>(event)
            }))
        }
    }
}

/// Reads a body as every route does ([`super::body::body_bytes`]: at most
/// [`super::body::MAX_BODY_BYTES`], 413 past that), its refusal as a JSON-RPC error.
pub(super) async fn read_body(payload: web::Payload) -> Result<web::BytesMut, RpcError> {
    body_bytes(payload)
        .await
        .map_err(|e| RpcError::new(status_of(e.code), INVALID_REQUEST, e.message))
}

/// A header's value as text; a value that is not text reads as empty, which
/// no check accepts.
pub(super) fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .map(|v| v.to_str().map(str::trim).unwrap_or(""))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    /// A header map of `pairs` (the other parts' tests build theirs here).
    pub(in crate::http::mcp) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    /// Request headers, and whether JSON and a stream may answer them.
    type AcceptCase<'a> = (&'a [(&'static str, &'a str)], bool, bool);

    #[test]
    fn accept_decides_json_and_streams() {
        let cases: &[AcceptCase<'_>] = &[
            (&[], true, false),
            (
                &[("accept", "application/json, text/event-stream")],
                true,
                true,
            ),
            (&[("accept", "text/event-stream")], false, true),
            (&[("accept", "*/*")], true, false),
            (&[("accept", "application/*;q=0.5")], true, false),
            (&[("accept", "text/html")], false, false),
            (
                &[("accept", "application/json;q=0, text/event-stream")],
                false,
                true,
            ),
            (
                &[
                    ("accept", "application/json"),
                    ("accept", "text/event-stream"),
                ],
                true,
                true,
            ),
        ];
        for (pairs, json, sse) in cases {
            assert_eq!(
                Accepts::of(&headers(pairs)),
                Accepts {
                    json: *json,
                    sse: *sse
                },
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn envelopes_parse_or_get_their_code() {
        let bad = [
            ("{", PARSE_ERROR, Value::Null),
            ("", PARSE_ERROR, Value::Null),
            ("[]", INVALID_REQUEST, Value::Null),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            ("7", INVALID_REQUEST, Value::Null),
            (r#"{"id":1,"method":"ping"}"#, INVALID_REQUEST, json!(1)),
            (
                r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
                INVALID_REQUEST,
                json!(1),
            ),
            (
                r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":7}"#,
                INVALID_REQUEST,
                json!("a"),
            ),
            (r#"{"jsonrpc":"2.0","id":"a"}"#, INVALID_REQUEST, json!("a")),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"x","params":[1]}"#,
                INVALID_REQUEST,
                json!(2),
            ),
        ];
        for (body, code, id) in bad {
            let (got_id, e) = Incoming::parse(body.as_bytes()).expect_err(body);
            assert_eq!(
                (e.code, e.status, got_id),
                (code, StatusCode::BAD_REQUEST, id),
                "{body}"
            );
        }
        let note =
            Incoming::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(note.id.is_none() && note.params.is_empty());
        let response = Incoming::parse(br#"{"jsonrpc":"2.0","id":5,"result":{}}"#).unwrap();
        assert!(response.method.is_none() && response.id == Some(json!(5)));
    }
}
