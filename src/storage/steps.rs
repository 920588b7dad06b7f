//! The journal's stored rows: each holds a *step*, the consecutive frames
//! of one session and one turn that one commit writes (a whole one-tool
//! turn of the offline game master is one step).
//!
//! A row per frame cost one insert and one entry in the journal's index
//! `(session_id, seq)` per frame, about six per turn: in a group commit of
//! many sessions every entry lands on its session's own leaf of the index,
//! and those page writes (and their checkpoints) were the largest part of
//! the writer's work. A row per step keeps that to one per turn.
//!
//! A row's `body` is a JSON array of its frames' entries, oldest first:
//! `{"seq":N,"kind":"…","turn_id":"…","request_id":"…","created_at":N,
//! "frame":{…},"effect":{…},"history":{…},"action":{…}}`, where the last
//! four are the stored JSON texts themselves (not strings holding them),
//! so a frame reads back as exactly the bytes that were sent, and absent
//! fields are left out. The row's other columns say what readers select
//! on: its first and last `seq`, the `turn_id`, whether the turn started
//! in it (`started`, with that chat's `request_id`), how it ended if it
//! ended in it (`ended`), and how many of its entries are applied actions.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{JournalRow, StorageError};

/// One stored row of the journal, as the writers insert it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Step<'a> {
    pub session_id: &'a str,
    /// The first frame's seq: the row's key with `session_id`.
    pub seq: i64,
    pub last_seq: i64,
    pub turn_id: Option<&'a str>,
    /// 1 if the step holds its turn's `turn_started`, else 0.
    pub started: i64,
    /// The `request_id` of that `turn_started`.
    pub request_id: Option<&'a str>,
    /// `turn_completed` or `turn_failed`, if the turn ended in the step.
    pub ended: Option<&'static str>,
    /// How many entries are applied actions (have an `action`).
    pub actions: i64,
    pub body: String,
    /// The first frame's time (ms since the epoch).
    pub created_at: i64,
}

/// Splits `rows` (in the order they were queued) into steps: runs of
/// consecutive rows of one session and one turn with consecutive seqs.
/// The order of rows, within and across sessions, is kept.
pub(super) fn group<'a>(rows: &[&'a JournalRow]) -> Vec<Step<'a>> {
    let mut steps = Vec::new();
    let mut start = 0;
    for i in 1..=rows.len() {
        let ends = i == rows.len() || {
            let (prev, next) = (rows[i - 1], rows[i]);
            next.session_id != prev.session_id
                || next.turn_id != prev.turn_id
                || next.seq != prev.seq + 1
        };
        if ends {
            steps.push(step(&rows[start..i]));
            start = i;
        }
    }
    steps
}

/// One step of `rows` (non-empty, one session and turn, in seq order).
fn step<'a>(rows: &[&'a JournalRow]) -> Step<'a> {
    let first = rows[0];
    let last = rows[rows.len() - 1];
    let start = rows.iter().find(|r| r.kind == "turn_started");
    Step {
        session_id: &first.session_id,
        seq: first.seq as i64,
        last_seq: last.seq as i64,
        turn_id: first.turn_id.as_deref(),
        started: i64::from(start.is_some()),
        request_id: start.and_then(|r| r.request_id.as_deref()),
        ended: rows
            .iter()
            .rev()
            .map(|r| r.kind)
            .find(|k| matches!(*k, "turn_completed" | "turn_failed")),
        actions: rows.iter().filter(|r| r.action.is_some()).count() as i64,
        body: encode(rows),
        created_at: first.created_at,
    }
}

/// The `body` of a step: its rows' entries as one JSON array.
fn encode(rows: &[&JournalRow]) -> String {
    let size: usize = rows
        .iter()
        .map(|r| {
            96 + r.frame.len()
                + [&r.effect, &r.history, &r.action]
                    .iter()
                    .filter_map(|t| t.as_ref().map(String::len))
                    .sum::<usize>()
        })
        .sum();
    let mut out = String::with_capacity(size);
    out.push('[');
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"seq\":");
        out.push_str(itoa::Buffer::new().format(r.seq));
        out.push_str(",\"kind\":");
        string(&mut out, r.kind);
        for (name, value) in [("turn_id", &r.turn_id), ("request_id", &r.request_id)] {
            if let Some(value) = value {
                out.push_str(",\"");
                out.push_str(name);
                out.push_str("\":");
                string(&mut out, value);
            }
        }
        out.push_str(",\"created_at\":");
        out.push_str(itoa::Buffer::new().format(r.created_at));
        out.push_str(",\"frame\":");
        out.push_str(&r.frame);
        for (name, value) in [
            ("effect", &r.effect),
            ("history", &r.history),
            ("action", &r.action),
        ] {
            if let Some(value) = value {
                out.push_str(",\"");
                out.push_str(name);
                out.push_str("\":");
                out.push_str(value);
            }
        }
        out.push('}');
    }
    out.push(']');
    out
}

/// Appends `s` as a JSON string. Ids, the common case, need no escaping
/// and are copied as they are.
fn string(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        // Writing JSON into a String cannot fail.
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// One frame of the journal, as read back from a step.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub seq: u64,
    pub kind: String,
    pub turn_id: Option<String>,
    pub request_id: Option<String>,
    pub created_at: i64,
    /// The frame's JSON text, exactly as it was sent.
    pub frame: String,
    pub effect: Option<String>,
    pub history: Option<String>,
    pub action: Option<String>,
}

#[derive(Deserialize)]
struct Stored<'a> {
    seq: u64,
    kind: String,
    #[serde(default)]
    turn_id: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
    created_at: i64,
    #[serde(borrow)]
    frame: &'a RawValue,
    #[serde(borrow, default)]
    effect: Option<&'a RawValue>,
    #[serde(borrow, default)]
    history: Option<&'a RawValue>,
    #[serde(borrow, default)]
    action: Option<&'a RawValue>,
}

/// The entries of a step's `body`, oldest first.
pub(super) fn decode(body: &str) -> Result<Vec<Entry>, StorageError> {
    let stored: Vec<Stored<'_>> =
        serde_json::from_str(body).map_err(|e| StorageError::Corrupt(e.to_string()))?;
    let text = |v: Option<&RawValue>| v.map(|v| v.get().to_owned());
    Ok(stored
        .into_iter()
        .map(|s| Entry {
            seq: s.seq,
            kind: s.kind,
            turn_id: s.turn_id,
            request_id: s.request_id,
            created_at: s.created_at,
            frame: s.frame.get().to_owned(),
            effect: text(s.effect),
            history: text(s.history),
            action: text(s.action),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(session: &str, seq: u64, turn: Option<&str>, kind: &'static str) -> JournalRow {
        JournalRow {
            session_id: session.to_owned(),
            seq,
            turn_id: turn.map(str::to_owned),
            kind,
            request_id: (kind == "turn_started").then(|| "r\"1\u{e9}".to_owned()),
            frame: format!("{{\"type\":\"{kind}\",\"seq\":{seq},\"text\":\"a \\\"b\\\" \u{e9}\"}}")
                .into(),
            effect: (kind == "tool_result").then(|| "{\"hp\": -3}".to_owned()),
            history: (kind == "narrative").then(|| "{\"role\":\"assistant\"}".to_owned()),
            action: (kind == "tool_result").then(|| "{\"tool\":\"move\"}".to_owned()),
            created_at: 1_700_000_000_000 + seq as i64,
        }
    }

    #[test]
    fn a_step_reads_back_as_the_rows_it_was_written_from_byte_for_byte() {
        let rows = [
            row("s", 7, Some("t1"), "turn_started"),
            row("s", 8, Some("t1"), "tool_result"),
            row("s", 9, Some("t1"), "narrative"),
            row("s", 10, Some("t1"), "turn_completed"),
        ];
        let refs: Vec<&JournalRow> = rows.iter().collect();
        let steps = group(&refs);
        assert_eq!(steps.len(), 1);
        let s = &steps[0];
        assert_eq!((s.seq, s.last_seq, s.turn_id), (7, 10, Some("t1")));
        assert_eq!((s.started, s.request_id), (1, Some("r\"1\u{e9}")));
        assert_eq!((s.ended, s.actions), (Some("turn_completed"), 1));
        let back = decode(&s.body).unwrap();
        assert_eq!(back.len(), 4);
        for (entry, row) in back.iter().zip(&rows) {
            assert_eq!(entry.seq, row.seq);
            assert_eq!(entry.kind, row.kind);
            assert_eq!(entry.turn_id, row.turn_id);
            assert_eq!(entry.request_id, row.request_id);
            assert_eq!(entry.created_at, row.created_at);
            assert_eq!(entry.frame, &*row.frame);
            assert_eq!(entry.effect, row.effect);
            assert_eq!(entry.history, row.history);
            assert_eq!(entry.action, row.action);
        }
    }

    #[test]
    fn steps_break_at_another_session_another_turn_or_a_gap_and_keep_the_order() {
        let rows = [
            row("a", 1, Some("t1"), "turn_started"),
            row("a", 2, Some("t1"), "tool_call"),
            row("b", 5, Some("u1"), "turn_started"),
            row("a", 3, Some("t1"), "turn_completed"),
            row("a", 4, Some("t2"), "turn_started"),
            row("a", 6, Some("t2"), "turn_failed"),
            row("a", 7, None, "presence"),
        ];
        let refs: Vec<&JournalRow> = rows.iter().collect();
        let steps = group(&refs);
        let spans: Vec<(&str, i64, i64)> = steps
            .iter()
            .map(|s| (s.session_id, s.seq, s.last_seq))
            .collect();
        assert_eq!(
            spans,
            [
                ("a", 1, 2),
                ("b", 5, 5),
                ("a", 3, 3),
                ("a", 4, 4),
                ("a", 6, 6),
                ("a", 7, 7)
            ]
        );
        assert_eq!(steps[2].ended, Some("turn_completed"));
        assert_eq!((steps[2].started, steps[3].started), (0, 1));
        assert_eq!(steps[4].ended, Some("turn_failed"));
        assert_eq!((steps[5].turn_id, steps[5].ended), (None, None));
    }

    #[test]
    fn strings_are_escaped_only_where_json_needs_it() {
        for s in [
            "turn_7",
            "r-1",
            "é 世界",
            "a\"b",
            "back\\slash",
            "tab\there",
            "\u{1}",
        ] {
            let mut out = String::new();
            string(&mut out, s);
            assert_eq!(serde_json::from_str::<String>(&out).unwrap(), s, "{out}");
        }
    }

    #[test]
    fn null_fields_read_as_absent() {
        // As the migrations carry a row per frame over (`json_object` and
        // `json_build_object` write every key, null or not).
        let body = r#"[{"seq" : 2, "kind" : "tool_result", "turn_id" : null, "request_id" : null, "created_at" : 6, "frame" : {"type":"tool_result","seq":2,"x":null}, "effect" : null, "history" : null, "action" : {"tool":"move"}}]"#;
        let entry = &decode(body).unwrap()[0];
        assert_eq!(
            (entry.turn_id.as_deref(), entry.request_id.as_deref()),
            (None, None)
        );
        assert_eq!(
            (entry.effect.as_deref(), entry.history.as_deref()),
            (None, None)
        );
        assert_eq!(entry.action.as_deref(), Some(r#"{"tool":"move"}"#));
        assert_eq!(entry.frame, r#"{"type":"tool_result","seq":2,"x":null}"#);
    }

    #[test]
    fn a_broken_body_is_corrupt_not_a_panic() {
        for body in [
            "",
            "[",
            "[{\"seq\":1}]",
            "{\"seq\":1}",
            "[{\"seq\":-1,\"kind\":\"x\",\"created_at\":0,\"frame\":{}}]",
        ] {
            assert!(
                matches!(decode(body), Err(StorageError::Corrupt(_))),
                "{body}"
            );
        }
    }
}
