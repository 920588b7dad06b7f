//! JSON text in one allocation of its final size, and the one check of
//! JSON a caller sends for U+0000, which PostgreSQL's `TEXT` cannot hold.
//!
//! `serde_json::to_string` starts from a small buffer and doubles it as it
//! writes: a tool result of a few hundred bytes costs three or four
//! reallocations and copies, and a turn writes several such texts (its
//! frames, the history entry, the applied action). Here each thread keeps
//! one scratch buffer that is written into and then copied out once, at
//! its exact length.

use std::cell::RefCell;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Scratch buffers bigger than this are not kept between calls, so one
/// large text does not hold its memory for the thread's life.
const KEEP_BYTES: usize = 64 * 1024;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(4096));
}

/// `value` as JSON text, as `serde_json::to_string` writes it.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    SCRATCH.with(|scratch| {
        // A serializer that itself serializes JSON text (a `Serialize`
        // impl calling back in here) finds the buffer taken and writes
        // into a fresh one instead.
        let Ok(mut buf) = scratch.try_borrow_mut() else {
            return serde_json::to_string(value);
        };
        buf.clear();
        let written = serde_json::to_writer(&mut *buf, value);
        let text = written.map(|()| {
            // serde_json writes only valid UTF-8. Checking it again keeps
            // this free of `unsafe`; `str::from_utf8` is the fast check
            // (whole words of ASCII at a time), where `from_utf8_lossy`
            // looked at every byte.
            match std::str::from_utf8(&buf) {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(&buf).into_owned(),
            }
        });
        if buf.capacity() > KEEP_BYTES {
            *buf = Vec::with_capacity(4096);
        }
        text
    })
}

/// `value` as JSON text, for types that always serialize (strings, JSON
/// values, plain structs of them); one that cannot be written (a map with
/// keys that are not strings) gives `null`.
pub fn text<T: Serialize + ?Sized>(value: &T) -> String {
    to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// `value` as JSON text kept as such ([`RawValue`]): serializing it again
/// copies the text instead of writing the value anew. A JSON value always
/// serializes; `null` stands in were it not to.
pub fn raw(value: &serde_json::Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// A JSON value and its text, written once and shared: a tool's result
/// as its `tool_result` frame, the HTTP answer, the idempotency record and
/// an MCP result's text all carry these bytes rather than write the value
/// again.
#[derive(Debug, Clone)]
pub struct Written {
    pub value: Value,
    pub json: Arc<RawValue>,
}

impl Written {
    /// Writes `value`'s text.
    pub fn new(value: Value) -> Self {
        let json = Arc::from(raw(&value));
        Self { value, json }
    }

    /// A value whose text was written already (by the tool pipeline, as it
    /// checked its size); `json` must be `value`'s text.
    pub fn with_text(value: Value, json: Arc<RawValue>) -> Self {
        Self { value, json }
    }

    /// A value whose text was kept (an idempotency record's), read back.
    pub fn from_json(json: Arc<RawValue>) -> Self {
        let value = serde_json::from_str(json.get()).unwrap_or(Value::Null);
        Self { value, json }
    }
}

impl PartialEq for Written {
    /// The text is written from the value, so the values decide.
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// The escape JSON text writes U+0000 with: a raw NUL byte is not valid
/// JSON, so text without this holds no NUL in any string or key.
const NUL_ESCAPE: &[u8] = b"\\u0000";

/// Longest JSON pointer a refusal names, in characters (keys are the
/// caller's and may be long); a longer one is cut and ends with `…`.
const MAX_POINTER_CHARS: usize = 200;

/// Where a JSON value holds U+0000: a string, or a key of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NulAt {
    /// The JSON pointer (RFC 6901) of the string, or of the object whose
    /// key holds it; cut at [`MAX_POINTER_CHARS`]. Never holds the NUL.
    pub pointer: String,
    /// Whether an object key holds it (rather than a string value).
    pub in_key: bool,
}

impl std::fmt::Display for NulAt {
    /// Names the place, never the value: `"/campaign/title" holds U+0000`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.pointer.is_empty() {
            "the top level"
        } else {
            &self.pointer
        };
        if self.in_key {
            write!(f, "a key of the object at {at:?} holds U+0000 (NUL)")
        } else {
            write!(f, "the string at {at:?} holds U+0000 (NUL)")
        }
    }
}

/// The first string or object key of `value` holding U+0000, depth first
/// in document order (an object's keys before what they hold), or `None`.
/// Every edge that takes JSON from a caller refuses such a value: the
/// databases store text, and PostgreSQL's `TEXT` refuses U+0000.
pub fn find_nul(value: &Value) -> Option<NulAt> {
    // Recursion is bounded: serde_json parses at most 128 levels deep.
    fn walk(value: &Value, path: &mut Vec<String>) -> Option<bool> {
        match value {
            Value::String(s) => s.contains('\0').then_some(false),
            Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                path.push(i.to_string());
                let found = walk(item, path);
                if found.is_none() {
                    path.pop();
                }
                found
            }),
            Value::Object(fields) => {
                if fields.keys().any(|k| k.contains('\0')) {
                    return Some(true);
                }
                fields.iter().find_map(|(key, item)| {
                    path.push(key.replace('~', "~0").replace('/', "~1"));
                    let found = walk(item, path);
                    if found.is_none() {
                        path.pop();
                    }
                    found
                })
            }
            _ => None,
        }
    }
    let mut path = Vec::new();
    let in_key = walk(value, &mut path)?;
    let mut pointer = String::new();
    for segment in &path {
        pointer.push('/');
        pointer.push_str(segment);
    }
    if pointer.chars().count() > MAX_POINTER_CHARS {
        pointer = pointer.chars().take(MAX_POINTER_CHARS).collect();
        pointer.push('…');
    }
    Some(NulAt { pointer, in_key })
}

/// [`find_nul`] of the JSON `text`, which is read only when it holds the
/// escape of U+0000 (a NUL can be nowhere else in valid JSON): text that
/// is not JSON, or holds no NUL, is `None`.
pub fn find_nul_in_text(text: &[u8]) -> Option<NulAt> {
    if !holds_nul_escape(text) {
        return None;
    }
    find_nul(&serde_json::from_slice(text).ok()?)
}

/// Whether JSON text holds the escape of U+0000 (perhaps not as one: an
/// escaped backslash before `u0000` matches too).
fn holds_nul_escape(text: &[u8]) -> bool {
    text.windows(NUL_ESCAPE.len()).any(|w| w == NUL_ESCAPE)
}

/// Whether `value` nests arrays and objects at most `limit` levels deep
/// (a scalar is 0 levels, `{}` and `[1]` one, `{"a":[]}` two). It looks no
/// deeper than `limit + 1`.
///
/// serde_json reads at most 128 levels and refuses deeper text, and what
/// questd stores wraps what a caller sent in a few levels of its own (a
/// frame in a journal entry, an event in a snapshot's state): a caller's
/// value that passes the parse could still be stored deeper than it reads
/// back. Values taken from callers are bounded well below that.
pub fn depth_within(value: &Value, limit: usize) -> bool {
    match value {
        Value::Array(items) => limit > 0 && items.iter().all(|v| depth_within(v, limit - 1)),
        Value::Object(fields) => limit > 0 && fields.values().all(|v| depth_within(v, limit - 1)),
        _ => true,
    }
}

/// [`depth_within`] of JSON text, counted over its brackets outside
/// strings without parsing it: exact for valid JSON; for other text, the
/// brackets it holds outside quotes.
pub fn text_depth_within(text: &str, limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return false;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// Turns every number of `value` with a zero fraction into an integer
/// (within `i64`, or `u64` when larger); answers whether any was. JSON
/// Schema counts `5.0` as an integer, where serde's integer fields do not:
/// a value the schema passed is read as the integers it holds.
pub fn whole_numbers_as_integers(value: &mut Value) -> bool {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // Below 2^63 (2^64) an `f64` with no fraction is an `i64` (`u64`)
            // exactly; `as` is checked by the bounds.
            let whole: Option<Value> = if f.fract() != 0.0 || !f.is_finite() {
                None
            } else if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
                Some((f as i64).into())
            } else if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                Some((f as u64).into())
            } else {
                None
            };
            whole.map(|w| *value = w).is_some()
        }
        // `|`, not `||`: every one is turned, not only the first.
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, v| whole_numbers_as_integers(v) | any),
        Value::Object(fields) => fields
            .values_mut()
            .fold(false, |any, v| whole_numbers_as_integers(v) | any),
        _ => false,
    }
}

/// Replaces U+0000 with U+FFFD in `text`, where text from outside (a
/// model's answer) is made storable rather than refused.
pub fn replace_nul(text: &mut String) {
    if text.contains('\0') {
        *text = text.replace('\0', "\u{FFFD}");
    }
}

/// [`replace_nul`] in every string and key of `value`.
pub fn replace_nul_in(value: &mut Value) {
    match value {
        Value::String(s) => replace_nul(s),
        Value::Array(items) => items.iter_mut().for_each(replace_nul_in),
        Value::Object(fields) => {
            if fields.keys().any(|k| k.contains('\0')) {
                *fields = std::mem::take(fields)
                    .into_iter()
                    .map(|(mut k, v)| {
                        replace_nul(&mut k);
                        (k, v)
                    })
                    .collect();
            }
            fields.values_mut().for_each(replace_nul_in);
        }
        _ => {}
    }
}

/// [`replace_nul`] in the JSON `text` (a model's tool arguments): where it
/// reads as JSON holding U+0000, it is written again with U+FFFD in its
/// place; other text is left as it is.
pub fn replace_nul_in_text(text: &mut String) {
    replace_nul(text);
    if !holds_nul_escape(text.as_bytes()) {
        return;
    }
    if let Ok(mut value) = serde_json::from_str::<Value>(text)
        && find_nul(&value).is_some()
    {
        replace_nul_in(&mut value);
        *text = self::text(&value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn depth_counts_arrays_and_objects_and_the_text_count_agrees_outside_strings() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        // (text, its depth)
        let cases = [
            ("5".to_owned(), 0usize),
            (r#""{[[[""#.to_owned(), 0),
            ("{}".to_owned(), 1),
            (r#"{"a":[1,{"b":"]]]"}],"c":{}}"#.to_owned(), 3),
            (r#"{"a":"\"{[","b":[[]]}"#.to_owned(), 3),
            (r#"["\\",[["x"]]]"#.to_owned(), 3),
            (nested(32), 32),
            (nested(127), 127),
        ];
        for (text, depth) in cases {
            let value: Value = serde_json::from_str(&text).expect("valid JSON");
            for limit in [depth.saturating_sub(1), depth, depth + 1] {
                let within = depth <= limit;
                assert_eq!(depth_within(&value, limit), within, "{text} at {limit}");
                assert_eq!(text_depth_within(&text, limit), within, "{text} at {limit}");
            }
        }
    }

    #[test]
    fn an_output_is_written_once_as_serde_writes_it() {
        let values = [
            json!({"b": 1, "a": [1, 2.5, "x"], "c": {"z": null}}),
            json!(null),
            json!("say \"hi\"\n"),
            json!([]),
        ];
        for value in values {
            let output = Written::new(value.clone());
            assert_eq!(output.json.get(), value.to_string());
            assert_eq!(Written::from_json(output.json.clone()), output);
        }
    }

    /// The same text as serde_json, for small and large values, one after
    /// another on the same thread (the scratch buffer reused and dropped).
    #[test]
    fn writes_what_serde_json_writes() {
        let big = "é\"\\\n".repeat(30_000);
        let values = [
            json!(null),
            json!({"b": 1, "a": [1.5, "x\u{1}y", {"z": true}]}),
            json!({"text": big}),
            json!("short"),
        ];
        for v in &values {
            assert_eq!(to_string(v).unwrap(), serde_json::to_string(v).unwrap());
            assert_eq!(text(v), v.to_string());
        }
    }

    /// Where U+0000 is found: the pointer of the string, or of the object
    /// whose key holds it; the first in document order; `None` without.
    #[test]
    fn find_nul_names_the_first_place_never_the_value() {
        let at = |pointer: &str, in_key| {
            Some(NulAt {
                pointer: pointer.into(),
                in_key,
            })
        };
        let table = [
            (
                json!({"title": "ok", "n": 1, "list": [null, true, 2.5]}),
                None,
            ),
            (json!("T\u{0}"), at("", false)),
            (
                json!({"campaign": {"title": "T\u{0}"}}),
                at("/campaign/title", false),
            ),
            (json!({"a": ["x", {"b": "\u{0}"}]}), at("/a/1/b", false)),
            (json!({"a/b": {"c~d": "\u{0}"}}), at("/a~1b/c~0d", false)),
            (json!({"o": {"k\u{0}": 1}}), at("/o", true)),
            (json!({"k\u{0}": "v\u{0}"}), at("", true)),
            (
                json!({"first": "\u{0}", "second": "\u{0}"}),
                at("/first", false),
            ),
            (json!(["a", "b\u{0}", "\u{0}"]), at("/1", false)),
        ];
        for (value, expected) in table {
            assert_eq!(find_nul(&value), expected, "{value}");
            assert_eq!(
                find_nul_in_text(value.to_string().as_bytes()),
                expected,
                "{value}"
            );
        }
        // Text that only looks like the escape, or is not JSON at all.
        assert_eq!(find_nul_in_text(br#"{"a":"\\u0000"}"#), None);
        assert_eq!(find_nul_in_text(br#"{"a":"\u0000"#), None);
        assert_eq!(find_nul_in_text(br#"{"a":"\u0000"}"#), at("/a", false));
    }

    #[test]
    fn a_long_pointer_is_cut_and_the_message_holds_no_nul() {
        let key = "k".repeat(1000);
        let found = find_nul(&json!({ key: "\u{0}" })).unwrap();
        assert_eq!(found.pointer.chars().count(), MAX_POINTER_CHARS + 1);
        assert!(found.pointer.ends_with('…'));
        let message = find_nul(&json!({"o": {"k\u{0}": 1}})).unwrap().to_string();
        assert_eq!(message, "a key of the object at \"/o\" holds U+0000 (NUL)");
        assert!(!message.contains('\0'));
        let message = find_nul(&json!({"t": "\u{0}"})).unwrap().to_string();
        assert_eq!(message, "the string at \"/t\" holds U+0000 (NUL)");
    }

    #[test]
    fn replacing_nul_leaves_no_nul_and_other_text_alone() {
        let mut text = "look \u{0} around".to_owned();
        replace_nul(&mut text);
        assert_eq!(text, "look \u{FFFD} around");
        let mut value = json!({"k\u{0}": ["\u{0}", {"x": "a\u{0}b"}], "n": 1});
        replace_nul_in(&mut value);
        assert_eq!(find_nul(&value), None);
        assert_eq!(value["k\u{FFFD}"][1]["x"], "a\u{FFFD}b");
        for (given, expected) in [
            (r#"{"name":"Bob\u0000"}"#, "{\"name\":\"Bob\u{FFFD}\"}"),
            (r#"{"name":"\\u0000"}"#, r#"{"name":"\\u0000"}"#),
            ("not json \\u0000", "not json \\u0000"),
            ("raw \u{0} nul", "raw \u{FFFD} nul"),
            (r#"{"plain":1}"#, r#"{"plain":1}"#),
        ] {
            let mut text = given.to_owned();
            replace_nul_in_text(&mut text);
            assert_eq!(text, expected, "{given}");
        }
    }

    /// A `Serialize` that serializes JSON itself while being written.
    #[test]
    fn a_nested_call_writes_its_own_text() {
        struct Nested;
        impl Serialize for Nested {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let inner =
                    to_string(&json!({"inner": [1, 2]})).map_err(serde::ser::Error::custom)?;
                s.serialize_str(&inner)
            }
        }
        assert_eq!(to_string(&Nested).unwrap(), r#""{\"inner\":[1,2]}""#);
    }
}
