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
//! A row's `body` is `{"format":2,"entries":[…]}`, its frames' entries
//! oldest first: `{"seq":N,"kind":"…","turn_id":"…","request_id":"…",
//! "created_at":N,"frame":{…},"effect":{…}}` and what the model's history
//! and the actions log read of it, where the JSON texts are written as
//! themselves (not strings holding them), so a frame reads back as exactly
//! the bytes that were sent, and absent fields are left out:
//! - `"history":{…}`, the history entry written out, or
//!   `"history_from_frame":true` when the frame says it
//!   ([`StoredHistory::FromFrame`]), with `"arguments":…`, the model's
//!   argument text, for a `tool_call`;
//! - `"action":{…}`, the applied action written out, or
//!   `"action_args":{…}`: the action is the `tool_result` frame's call with
//!   these arguments ([`StoredAction::FromFrame`]).
//!
//! [`decode`] reads both back as the JSON texts they stand for. Writing
//! them out was a quarter of a roll turn's body (2,383 bytes, now 1,772)
//! and 7 % of its instructions (BENCHMARKS.md). Bodies written before
//! this format are a bare JSON array of entries with `history` and
//! `action` written out; they read as before. Readers of that format
//! refuse this one as corrupt (it is not an array) rather than read it
//! without history. A body of a format newer than this build reads
//! ([`super::formats::JOURNAL_FORMAT`]) is refused by name
//! ([`StorageError::NewerFormat`]), not as corrupt.
//!
//! The row's other columns say what readers select on: its first and last
//! `seq`, the `turn_id`, whether the turn started in it (`started`, with
//! that chat's `request_id`), how it ended if it ended in it (`ended`),
//! and how many of its entries are applied actions.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{JournalRow, StorageError, StoredAction, StoredHistory};
use crate::game::HistoryEntry;
use crate::ids::{CallId, RequestId, TurnId};

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

/// The `body` of a step: `{"format":2,"entries":[…]}`, its rows' entries
/// in order.
fn encode(rows: &[&JournalRow]) -> String {
    let size: usize = rows
        .iter()
        .map(|r| {
            128 + r.frame.len()
                + r.effect.as_ref().map_or(0, String::len)
                + r.history.as_ref().map_or(0, |h| match h {
                    StoredHistory::Json(text) => text.len(),
                    StoredHistory::FromFrame { arguments } => {
                        arguments.as_ref().map_or(0, String::len)
                    }
                })
                + r.action.as_ref().map_or(0, |a| match a {
                    StoredAction::Json(text) => text.len(),
                    StoredAction::FromFrame { args } => args.len(),
                })
        })
        .sum();
    let mut out = String::with_capacity(size);
    out.push_str(FORMAT_2);
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"seq\":");
        out.push_str(itoa::Buffer::new().format(r.seq));
        out.push_str(",\"kind\":");
        string(&mut out, r.kind);
        for (name, value) in [
            ("turn_id", r.turn_id.as_deref()),
            ("request_id", r.request_id.as_deref()),
        ] {
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
        let mut json = |name: &str, value: &str| {
            out.push_str(",\"");
            out.push_str(name);
            out.push_str("\":");
            out.push_str(value);
        };
        if let Some(effect) = &r.effect {
            json("effect", effect);
        }
        match &r.history {
            Some(StoredHistory::Json(text)) => json("history", text),
            Some(StoredHistory::FromFrame { arguments }) => {
                json("history_from_frame", "true");
                if let Some(arguments) = arguments {
                    json("arguments", arguments);
                }
            }
            None => {}
        }
        match &r.action {
            Some(StoredAction::Json(text)) => json("action", text),
            Some(StoredAction::FromFrame { args }) => json("action_args", args),
            None => {}
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// How a body of the current format starts. Bodies written before it
/// are a bare array of entries that hold their history and action
/// written out; one of this format is an object, which those older
/// readers refuse as corrupt rather than read without the entries'
/// history and action.
const FORMAT_2: &str = "{\"format\":2,\"entries\":[";

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
    pub turn_id: Option<TurnId>,
    pub request_id: Option<RequestId>,
    pub created_at: i64,
    /// The frame's JSON text, exactly as it was sent.
    pub frame: String,
    pub effect: Option<String>,
    /// The history entry's JSON text, as stored or read from the frame.
    pub history: Option<String>,
    /// The applied action's JSON text, as stored or read from the frame.
    pub action: Option<String>,
}

#[derive(Deserialize)]
struct Stored<'a> {
    seq: u64,
    kind: String,
    #[serde(default)]
    turn_id: Option<TurnId>,
    #[serde(default)]
    request_id: Option<RequestId>,
    created_at: i64,
    #[serde(borrow)]
    frame: &'a RawValue,
    #[serde(borrow, default)]
    effect: Option<&'a RawValue>,
    #[serde(borrow, default)]
    history: Option<&'a RawValue>,
    #[serde(borrow, default)]
    action: Option<&'a RawValue>,
    #[serde(default)]
    history_from_frame: bool,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    action_args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Body<'a> {
    format: u64,
    #[serde(borrow)]
    entries: Vec<Stored<'a>>,
}

/// An id a frame does not say (the empty string, as a missing `String`
/// field read before).
fn no_id<T: From<&'static str>>() -> T {
    T::from("")
}

/// What a frame says that a history entry or an action is read from.
#[derive(Deserialize)]
struct Said<'a> {
    #[serde(default = "no_id")]
    turn_id: TurnId,
    #[serde(default = "no_id")]
    call_id: CallId,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    status: String,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    reply: Option<String>,
    /// A `turn_started`'s speaker (null for a round's).
    #[serde(default)]
    seat_id: Option<crate::ids::SeatId>,
}

/// The action an applied call's `tool_result` frame says, with its
/// arguments: the fields in the order of their names, as actions written
/// out have always been stored.
#[derive(serde::Serialize)]
struct Applied<'a> {
    args: &'a RawValue,
    call_id: &'a str,
    result: &'a RawValue,
    status: &'a str,
    tool: &'a str,
    turn_id: &'a str,
}

/// The entries of a step's `body`, oldest first: bodies of the current
/// format, and the bare arrays written before it.
pub(super) fn decode(body: &str) -> Result<Vec<Entry>, StorageError> {
    let corrupt = |e: serde_json::Error| StorageError::Corrupt(e.to_string());
    let stored: Vec<Stored<'_>> = if body.trim_start().starts_with('{') {
        let body: Body<'_> = serde_json::from_str(body).map_err(corrupt)?;
        super::formats::check(super::formats::Stored::Journal, body.format)?;
        if body.format != u64::from(super::formats::JOURNAL_FORMAT) {
            return Err(StorageError::Corrupt(format!(
                "a journal step object of format {}, which no version wrote",
                body.format
            )));
        }
        body.entries
    } else {
        serde_json::from_str(body).map_err(corrupt)?
    };
    stored.into_iter().map(entry).collect()
}

fn entry(s: Stored<'_>) -> Result<Entry, StorageError> {
    let text = |v: Option<&RawValue>| v.map(|v| v.get().to_owned());
    let said = if s.history_from_frame || s.action_args.is_some() {
        Some(
            serde_json::from_str::<Said<'_>>(s.frame.get())
                .map_err(|e| StorageError::Corrupt(format!("frame {}: {e}", s.seq)))?,
        )
    } else {
        None
    };
    let history = match &said {
        Some(said) if s.history_from_frame => Some(history_said(&s, said)?),
        _ => text(s.history),
    };
    let action = match (&said, s.action_args) {
        (Some(said), Some(args)) => {
            let result = said.result.ok_or_else(|| {
                StorageError::Corrupt(format!("frame {} has no result for its action", s.seq))
            })?;
            Some(json(&Applied {
                args,
                call_id: &said.call_id,
                result,
                status: &said.status,
                tool: &said.tool,
                turn_id: &said.turn_id,
            })?)
        }
        _ => text(s.action),
    };
    Ok(Entry {
        seq: s.seq,
        turn_id: s.turn_id,
        request_id: s.request_id,
        created_at: s.created_at,
        frame: s.frame.get().to_owned(),
        effect: text(s.effect),
        history,
        action,
        kind: s.kind,
    })
}

/// The history entry a frame says ([`StoredHistory::FromFrame`]), as
/// JSON text.
fn history_said(s: &Stored<'_>, said: &Said<'_>) -> Result<String, StorageError> {
    let missing =
        || StorageError::Corrupt(format!("frame {} does not say its history entry", s.seq));
    let turn_id = said.turn_id.clone();
    let entry = match s.kind.as_str() {
        "turn_started" => HistoryEntry::User {
            turn_id,
            text: said.text.clone().ok_or_else(missing)?,
            seat_id: said.seat_id.clone(),
        },
        "tool_call" => HistoryEntry::ToolCall {
            turn_id,
            call_id: said.call_id.clone(),
            tool: said.tool.clone(),
            arguments: s.arguments.ok_or_else(missing)?.get().to_owned(),
        },
        "tool_result" => HistoryEntry::ToolResult {
            turn_id,
            call_id: said.call_id.clone(),
            tool: said.tool.clone(),
            content: said.result.ok_or_else(missing)?.get().to_owned(),
        },
        "turn_completed" => HistoryEntry::Assistant {
            turn_id,
            text: said.reply.clone().ok_or_else(missing)?,
        },
        _ => return Err(missing()),
    };
    json(&entry)
}

fn json(value: &impl serde::Serialize) -> Result<String, StorageError> {
    serde_json::to_string(value).map_err(|e| StorageError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(session: &str, seq: u64, turn: Option<&str>, kind: &'static str) -> JournalRow {
        JournalRow {
            session_id: session.into(),
            seq,
            turn_id: turn.map(crate::ids::TurnId::from),
            kind,
            request_id: (kind == "turn_started").then(|| "r\"1\u{e9}".into()),
            frame: format!("{{\"type\":\"{kind}\",\"seq\":{seq},\"text\":\"a \\\"b\\\" \u{e9}\"}}")
                .into(),
            effect: (kind == "tool_result").then(|| "{\"hp\": -3}".to_owned()),
            history: (kind == "narrative")
                .then(|| StoredHistory::Json("{\"role\":\"assistant\"}".to_owned())),
            action: (kind == "tool_result")
                .then(|| StoredAction::Json("{\"tool\":\"move\"}".to_owned())),
            created_at: 1_700_000_000_000 + seq as i64,
            timers: Vec::new(),
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
            assert_eq!(entry.turn_id.as_deref(), row.turn_id.as_deref());
            assert_eq!(entry.request_id, row.request_id);
            assert_eq!(entry.created_at, row.created_at);
            assert_eq!(entry.frame, &*row.frame);
            assert_eq!(entry.effect, row.effect);
            let history = row.history.as_ref().map(|h| match h {
                StoredHistory::Json(text) => text.clone(),
                StoredHistory::FromFrame { .. } => unreachable!("written out"),
            });
            assert_eq!(entry.history, history);
            let action = row.action.as_ref().map(|a| match a {
                StoredAction::Json(text) => text.clone(),
                StoredAction::FromFrame { .. } => unreachable!("written out"),
            });
            assert_eq!(entry.action, action);
        }
    }

    /// A one-tool turn as the session journals it: every history entry
    /// and the action left for the frames to say.
    fn lean_turn() -> Vec<JournalRow> {
        let frames = [
            (
                "turn_started",
                r#"{"seq":1,"type":"turn_started","turn_id":"turn_1","request_id":"r-1","actor_id":"pc_001","text":"roll \"1d20\" é"}"#,
            ),
            (
                "tool_call",
                r#"{"seq":2,"type":"tool_call","turn_id":"turn_1","iteration":1,"call_id":"call_1","tool":"roll_dice","args":{"dice":"1d20","reason":"why"}}"#,
            ),
            (
                "tool_result",
                r#"{"seq":3,"type":"tool_result","turn_id":"turn_1","call_id":"call_1","tool":"roll_dice","status":"ok","result":{"rolls":[19],"total":19,"note":"a \"b\""},"duration_ms":0.007}"#,
            ),
            (
                "turn_completed",
                r#"{"seq":4,"type":"turn_completed","turn_id":"turn_1","reply":"You roll: 19.\nWell done.","iterations":2}"#,
            ),
        ];
        frames
            .into_iter()
            .enumerate()
            .map(|(i, (kind, frame))| JournalRow {
                session_id: "s".into(),
                seq: i as u64 + 1,
                turn_id: Some("turn_1".into()),
                kind,
                request_id: (kind == "turn_started").then(|| "r-1".into()),
                frame: frame.into(),
                effect: None,
                history: Some(StoredHistory::FromFrame {
                    arguments: (kind == "tool_call")
                        .then(|| r#"{"reason": "why", "dice": "1d20"}"#.into()),
                }),
                action: (kind == "tool_result").then(|| StoredAction::FromFrame {
                    args: r#"{"reason": "why", "dice": "1d20"}"#.into(),
                }),
                created_at: 5,
                timers: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn a_lean_step_reads_back_with_the_history_and_action_its_frames_say() {
        let rows = lean_turn();
        let refs: Vec<&JournalRow> = rows.iter().collect();
        let steps = group(&refs);
        assert_eq!((steps.len(), steps[0].actions), (1, 1));
        let back = decode(&steps[0].body).unwrap();
        let history: Vec<HistoryEntry> = back
            .iter()
            .map(|e| serde_json::from_str(e.history.as_deref().unwrap()).unwrap())
            .collect();
        let turn_id = || TurnId::from("turn_1");
        assert_eq!(
            history,
            [
                HistoryEntry::User {
                    turn_id: turn_id(),
                    text: "roll \"1d20\" é".into(),
                    seat_id: None,
                },
                HistoryEntry::ToolCall {
                    turn_id: turn_id(),
                    call_id: "call_1".into(),
                    tool: "roll_dice".into(),
                    // The model's own text, spaces and order kept.
                    arguments: r#"{"reason": "why", "dice": "1d20"}"#.into(),
                },
                HistoryEntry::ToolResult {
                    turn_id: turn_id(),
                    call_id: "call_1".into(),
                    tool: "roll_dice".into(),
                    content: r#"{"rolls":[19],"total":19,"note":"a \"b\""}"#.into(),
                },
                HistoryEntry::Assistant {
                    turn_id: turn_id(),
                    text: "You roll: 19.\nWell done.".into()
                },
            ]
        );
        let actions: Vec<Option<&str>> = back.iter().map(|e| e.action.as_deref()).collect();
        assert_eq!(
            actions,
            [
                None,
                None,
                Some(
                    r#"{"args":{"reason": "why", "dice": "1d20"},"call_id":"call_1","result":{"rolls":[19],"total":19,"note":"a \"b\""},"status":"ok","tool":"roll_dice","turn_id":"turn_1"}"#
                ),
                None
            ]
        );
        for (entry, row) in back.iter().zip(&rows) {
            assert_eq!(entry.frame, &*row.frame, "frames read back as sent");
        }
    }

    #[test]
    fn a_reader_of_bare_arrays_refuses_a_lean_step_instead_of_misreading_it() {
        let rows = lean_turn();
        let refs: Vec<&JournalRow> = rows.iter().collect();
        let body = &group(&refs)[0].body;
        // What readers before this format parse a body as.
        assert!(serde_json::from_str::<Vec<serde_json::Value>>(body).is_err());
        assert!(body.starts_with(&format!(
            "{{\"format\":{},",
            super::super::formats::JOURNAL_FORMAT
        )));
        // A newer format is refused by name, not read as corrupt.
        assert!(matches!(
            decode(&body.replacen("\"format\":2", "\"format\":3", 1)),
            Err(StorageError::NewerFormat {
                found: 3,
                newest: 2,
                ..
            })
        ));
        assert!(matches!(
            decode(&body.replacen("\"format\":2", "\"format\":1", 1)),
            Err(StorageError::Corrupt(m)) if m.contains("format 1")
        ));
    }

    #[test]
    fn a_frame_that_does_not_say_its_history_is_corrupt() {
        let mut rows = lean_turn();
        rows[3].frame = r#"{"seq":4,"type":"turn_completed","turn_id":"turn_1"}"#.into();
        rows[1].history = Some(StoredHistory::FromFrame { arguments: None });
        for broken in [&rows[3], &rows[1]] {
            let body = &group(&[broken])[0].body;
            assert!(
                matches!(decode(body), Err(StorageError::Corrupt(_))),
                "{body}"
            );
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
