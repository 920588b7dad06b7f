//! The lead of a story frame as questd writes it ([`super::StoryFrame`]:
//! `seq`, then the event's `type`, then a turn's `turn_id`), read without
//! parsing the frame. The journal leaves out of a stored entry what its
//! frame's lead says (`storage::steps`), and the load test judges a
//! spectator's frame by its lead (`loadtest::check`).

/// What `{"seq":N,"type":"K"` and, where it follows at once,
/// `,"turn_id":"T"` or `,"turn_id":null` say at the start of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lead<'a> {
    pub seq: u64,
    pub kind: &'a str,
    /// `None`: no `turn_id` right after the kind; `Some(None)`: `null`.
    pub turn_id: Option<Option<&'a str>>,
}

impl<'a> Lead<'a> {
    /// The lead of `frame`, or `None` when the frame does not open so:
    /// other keys first, spaces, a number JSON does not write (a leading
    /// zero, a sign, past `u64`), or an escape or control character in the
    /// kind or the turn id (only a parser reads those).
    pub fn of(frame: &'a str) -> Option<Self> {
        let rest = frame.strip_prefix("{\"seq\":")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || (digits > 1 && rest.starts_with('0')) {
            return None;
        }
        let seq = rest[..digits].parse().ok()?;
        let (kind, rest) = quoted(rest[digits..].strip_prefix(",\"type\":")?)?;
        let (turn_id, rest) = match rest.strip_prefix(",\"turn_id\":") {
            None => (None, rest),
            Some(turn) => match turn.strip_prefix("null") {
                Some(rest) => (Some(None), rest),
                None => {
                    let (id, rest) = quoted(turn)?;
                    (Some(Some(id)), rest)
                }
            },
        };
        (rest.starts_with(',') || rest.starts_with('}')).then_some(Self { seq, kind, turn_id })
    }
}

/// A JSON string at the start of `s` written as it is (no escape, no
/// control character), and what follows it.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let (text, rest) = s.strip_prefix('"')?.split_once('"')?;
    plain(text).then_some((text, rest))
}

/// Whether `s` is written in JSON as it is, between quotes.
pub fn plain(s: &str) -> bool {
    s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// A story frame as questd writes it, its lead then `rest` (for tests).
#[cfg(test)]
pub fn led(seq: u64, kind: &str, turn: Option<&str>, rest: &str) -> String {
    let turn = turn.map_or("null".to_owned(), |t| format!("\"{t}\""));
    format!("{{\"seq\":{seq},\"type\":\"{kind}\",\"turn_id\":{turn}{rest}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lead_is_read_only_when_it_is_questds_usual_one() {
        let lead = |seq, kind, turn_id| Some(Lead { seq, kind, turn_id });
        assert_eq!(
            Lead::of(&led(
                7,
                "tool_call",
                Some("turn_1"),
                r#","args":{"a":"\"x\""}"#
            )),
            lead(7, "tool_call", Some(Some("turn_1")))
        );
        assert_eq!(
            Lead::of(&led(0, "presence", None, "")),
            lead(0, "presence", Some(None))
        );
        // No turn id right after the kind: the lead is seq and kind.
        assert_eq!(
            Lead::of(r#"{"seq":7,"type":"tool_call","call_id":"c"}"#),
            lead(7, "tool_call", None)
        );
        assert_eq!(
            Lead::of(r#"{"seq":7,"type":"presence"}"#),
            lead(7, "presence", None)
        );
        for text in [
            // Another order of the same fields.
            r#"{"type":"tool_call","seq":7,"turn_id":"turn_1"}"#,
            r#"{"seq":7,"turn_id":"turn_1","type":"tool_call"}"#,
            // Not JSON's numbers.
            r#"{"seq":07,"type":"tool_call","turn_id":"turn_1"}"#,
            r#"{"seq":-7,"type":"tool_call","turn_id":"turn_1"}"#,
            r#"{"seq":99999999999999999999,"type":"tool_call","turn_id":"turn_1"}"#,
            // Escapes and control characters, read only by a real parser.
            r#"{"seq":7,"type":"tool\u005fcall","turn_id":"turn_1"}"#,
            r#"{"seq":7,"type":"tool_call","turn_id":"turn\"1"}"#,
            "{\"seq\":7,\"type\":\"tool_call\",\"turn_id\":\"turn\t1\"}",
            // A kind or turn id that does not end its field.
            r#"{"seq":7,"type":"tool_call"x}"#,
            r#"{"seq":7,"type":"tool_call","turn_id":"turn_1"x}"#,
            r#"{"seq":7,"type":"tool_call","turn_id":nullx}"#,
            r#"{ "seq":7,"type":"tool_call","turn_id":"turn_1"}"#,
        ] {
            assert_eq!(Lead::of(text), None, "{text}");
        }
    }
}
