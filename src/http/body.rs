//! What a request carries, read within bounds: its body (at most
//! [`MAX_BODY_BYTES`], JSON without U+0000) and its query string (refused
//! with what the route takes, never the parser's words).

use std::time::Duration;

use actix_web::web;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};

/// Largest HTTP request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Reads a JSON body of at most [`MAX_BODY_BYTES`]; an empty body is `{}`.
pub async fn json_body_or_empty(payload: web::Payload) -> Result<serde_json::Value, ApiError> {
    let body = body_bytes(payload).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::json!({}));
    }
    parse_json(&body)
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`].
pub async fn json_body(payload: web::Payload) -> Result<serde_json::Value, ApiError> {
    parse_json(&body_bytes(payload).await?)
}

/// A body as JSON, refused (`400 BAD_REQUEST`) when it is not JSON or
/// when any string or key in it holds U+0000 ([`nul_refused`]).
pub(crate) fn parse_json(body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("body is not valid JSON: {e}")))?;
    match crate::json::find_nul(&value) {
        Some(at) => Err(nul_refused(&at)),
        None => Ok(value),
    }
}

/// A JSON body of at most [`MAX_BODY_BYTES`] read straight into `T`, never
/// through a `serde_json::Value`; with `empty_is_object`, a blank body is
/// `{}`. Refused exactly as [`parse_json`] and then `serde_json::from_value`
/// refuse: not JSON, U+0000 anywhere, or not a `T` (`invalid body: ...`).
pub async fn decode<T: DeserializeOwned>(
    payload: web::Payload,
    empty_is_object: bool,
) -> Result<T, ApiError> {
    let body = body_bytes(payload).await?;
    if empty_is_object && body.iter().all(u8::is_ascii_whitespace) {
        return decode_slice(b"{}");
    }
    decode_slice(&body)
}

/// [`decode`] of a body already read. Every body decoded so is an object
/// of named fields: an array is refused, though serde would read one as
/// the fields in order (`["roll_dice", {…}]` would be a tool call).
pub fn decode_slice<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.trim_ascii_start().starts_with(b"[") {
        return Err(ApiError::bad_request(
            "invalid body: a JSON object is expected, not an array",
        ));
    }
    match serde_json::from_slice(body) {
        // Valid JSON holds U+0000 only as its escape, which the text is
        // searched for before anything is parsed again.
        Ok(decoded) => match crate::json::find_nul_in_text(body) {
            Some(at) => Err(nul_refused(&at)),
            None => Ok(decoded),
        },
        // The way through a `Value` words each refusal as it always was
        // (and takes what only it reads, such as a repeated key).
        Err(_) => serde_json::from_value(parse_json(body)?)
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}"))),
    }
}

/// The refusal of a body that holds U+0000, naming where (never what):
/// PostgreSQL's `TEXT` cannot store it, so nothing a caller sends may
/// carry it to a write that other sessions share.
pub fn nul_refused(at: &crate::json::NulAt) -> ApiError {
    ApiError::bad_request(format!("the body is refused: {at}"))
}

/// Where a request's URL holds an encoded U+0000 (`%00`): `"path"` or
/// `"query string"`. A literal NUL never gets this far (the HTTP parser
/// refuses it); the encoded one would be decoded into a session id, a
/// token or a site id that reaches SQL.
pub fn nul_in_url(uri: &actix_web::http::Uri) -> Option<&'static str> {
    let holds = |text: &str| text.contains("%00");
    if holds(uri.path()) {
        Some("path")
    } else if uri.query().is_some_and(holds) {
        Some("query string")
    } else {
        None
    }
}

/// Middleware: a request whose URL holds an encoded U+0000 is refused with
/// `400 BAD_REQUEST` before any route sees it ([`nul_in_url`]).
pub async fn refuse_nul_in_url(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    if let Some(part) = nul_in_url(req.uri()) {
        let e = ApiError::bad_request(format!("the {part} holds an encoded U+0000 (%00)"));
        return Ok(req.error_response(e).map_into_boxed_body());
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// Reads a body of at most [`MAX_BODY_BYTES`] (413 past that).
pub(crate) async fn body_bytes(
    payload: impl futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>
    + Unpin,
) -> Result<web::BytesMut, ApiError> {
    body_within(payload, MAX_BODY_BYTES).await
}

/// Longest a request body may go without a byte arriving.
pub const BODY_IDLE: Duration = Duration::from_secs(15);
/// Longest a whole request body may take to arrive.
pub const BODY_DEADLINE: Duration = Duration::from_secs(120);

/// Reads a body of at most `limit` bytes, stopping as soon as it is past
/// (413). A body that breaks off is a `400` that names no cause: actix's
/// words for it are a Rust `Debug` string, which goes to the log only.
///
/// actix times out a request's head (5 s), never its body: a client that
/// declares a length and sends less would hold its connection and this
/// read forever. A body that stalls for [`BODY_IDLE`], or has not all
/// come after [`BODY_DEADLINE`], is `408 TIMEOUT`.
pub(crate) async fn body_within(
    payload: impl futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>
    + Unpin,
    limit: usize,
) -> Result<web::BytesMut, ApiError> {
    body_within_times(payload, limit, BODY_IDLE, BODY_DEADLINE).await
}

/// [`body_within`] with its two times given.
async fn body_within_times(
    mut payload: impl futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>
    + Unpin,
    limit: usize,
    idle: Duration,
    deadline: Duration,
) -> Result<web::BytesMut, ApiError> {
    let late = |what: &str| {
        ApiError::new(
            ErrorCode::Timeout,
            format!("the request body {what}; send it whole, without pauses"),
        )
    };
    let end = tokio::time::Instant::now() + deadline;
    let mut body = web::BytesMut::new();
    loop {
        let next = tokio::time::timeout(idle, payload.next());
        let chunk = match tokio::time::timeout_at(end, next).await {
            Err(_) => {
                return Err(late(&format!(
                    "did not all arrive in {} s",
                    deadline.as_secs()
                )));
            }
            Ok(Err(_)) => return Err(late(&format!("stalled for {} s", idle.as_secs()))),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        let chunk = chunk.map_err(|e| {
            tracing::debug!(error = %e, "a request body could not be read");
            ApiError::bad_request("the body could not be read whole")
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("body is larger than {limit} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A page size from `?limit=`: `default` when absent, within 1..=`max`.
pub fn page_size(asked: Option<u32>, default: u32, max: u32) -> u32 {
    asked.unwrap_or(default).clamp(1, max)
}

/// A query string that did not read, as `400 BAD_REQUEST` saying what
/// the route takes (`rule`) rather than the parser's words.
pub fn bad_query(rule: &'static str) -> impl FnOnce(actix_web::Error) -> ApiError {
    move |_| ApiError::bad_request(format!("the query string is invalid: {rule}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body read the way every route read one before [`decode_slice`]:
    /// into a `Value`, then into the type.
    fn through_a_value<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
        serde_json::from_value(parse_json(body)?)
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Call {
        tool_name: String,
        #[serde(default)]
        input: Option<serde_json::Value>,
    }

    #[test]
    fn a_body_decoded_once_reads_and_is_refused_as_before() {
        let bodies: &[&[u8]] = &[
            br#"{"tool_name":"roll_dice","input":{"dice":"1d6"}}"#,
            br#"{"tool_name":"roll_dice"}"#,
            br#"  {"input": null, "tool_name": "x", "extra": [1, 2]}  "#,
            // A repeated key: a `Value` keeps the last one.
            br#"{"tool_name":"a","tool_name":"b"}"#,
            br#"{"tool_name":7}"#,
            br#"{"input":{}}"#,
            br#"{"tool_name":"a""#,
            br#"{"tool_name":"a"} trailing"#,
            b"",
            br#"{"tool_name":"a\u0000b"}"#,
            br#"{"tool_name":"a","input":{"k\u0000":1}}"#,
            br#"{"tool_name":"a","input":{"note":"\\u0000 is only text"}}"#,
            br#"{"tool_name":7,"input":"\u0000"}"#,
        ];
        for body in bodies {
            let once = decode_slice::<Call>(body);
            let before = through_a_value::<Call>(body);
            let shown = String::from_utf8_lossy(body);
            match (once, before) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{shown}"),
                (Err(a), Err(b)) => {
                    assert_eq!((a.code, &a.message), (b.code, &b.message), "{shown}");
                }
                (a, b) => panic!("{shown}: {a:?} against {b:?}"),
            }
        }
    }

    /// A body stream that yields `chunks`, then waits forever.
    fn stalling(
        chunks: &[&'static [u8]],
    ) -> impl futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>> + Unpin
    {
        let given: Vec<Result<web::Bytes, actix_web::error::PayloadError>> = chunks
            .iter()
            .map(|c| Ok(web::Bytes::from_static(c)))
            .collect();
        futures_util::stream::iter(given).chain(futures_util::stream::pending())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_or_drags_on_is_a_timeout() {
        let hour = Duration::from_secs(3600);
        // A client that declared more than it sent: it stalls.
        let e = body_within_times(stalling(&[b"{\"campaign_id\""]), 1024, BODY_IDLE, hour)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Timeout);
        assert_eq!(
            e.message,
            "the request body stalled for 15 s; send it whole, without pauses"
        );
        // A byte now and then, each in time, never the whole body.
        let dribble = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Some((Ok(web::Bytes::from_static(b" ")), ()))
        });
        let e = body_within_times(Box::pin(dribble), 1024, BODY_IDLE, BODY_DEADLINE)
            .await
            .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                ErrorCode::Timeout,
                "the request body did not all arrive in 120 s; send it whole, without pauses"
            )
        );
        // A whole body reads, however it is cut; past the limit is 413.
        let whole = futures_util::stream::iter([
            Ok(web::Bytes::from_static(b"{\"a\":")),
            Ok(web::Bytes::from_static(b"1}")),
        ]);
        assert_eq!(&body_within(whole, 1024).await.unwrap()[..], b"{\"a\":1}");
        let e = body_within(stalling(&[b"0123456789"]), 4)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }

    #[test]
    fn an_array_is_no_body() {
        // serde reads a struct from an array of its fields in order; a
        // route never takes one.
        let fields = br#"["roll_dice", {"dice": "1d6", "reason": "r"}]"#;
        assert!(through_a_value::<Call>(fields).is_ok());
        for body in [&fields[..], b" [1, 2]", b"[]"] {
            let e = decode_slice::<Call>(body).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (
                    ErrorCode::BadRequest,
                    "invalid body: a JSON object is expected, not an array"
                ),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn an_encoded_nul_anywhere_in_the_url_is_found() {
        let table = [
            ("/api/v1/sessions/sess_1", None),
            ("/api/v1/sessions/sess_1/journal?after_seq=3", None),
            ("/api/v1/sessions/sess_%00", Some("path")),
            ("/api/v1/sites/a%00b", Some("path")),
            ("/ws/sessions/s?token=t%00", Some("query string")),
            ("/ws/sessions/s?token=%2500", None),
            ("/x%00?y=%00", Some("path")),
        ];
        for (uri, expected) in table {
            let uri: actix_web::http::Uri = uri.parse().unwrap();
            assert_eq!(nul_in_url(&uri), expected, "{uri}");
        }
    }
}
