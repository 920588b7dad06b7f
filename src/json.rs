//! JSON text in one allocation of its final size.
//!
//! `serde_json::to_string` starts from a small buffer and doubles it as it
//! writes: a tool result of a few hundred bytes costs three or four
//! reallocations and copies, and a turn writes several such texts (its
//! frames, the history entry, the applied action). Here each thread keeps
//! one scratch buffer that is written into and then copied out once, at
//! its exact length.

use std::cell::RefCell;

use serde::Serialize;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
