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
use crate::protocol::lead::{Lead, plain};

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

/// The `body` of a step: `{"format":3,"entries":[…]}`, its rows' entries
/// in order, each leaving out what its frame already says (format 3):
/// - `seq` and `kind` when the frame's lead ([`Lead`]) says them, and
///   `turn_id` when the lead says it too (a row with no turn says
///   `"turn_id":null`);
/// - `created_at` when it is the previous entry's;
/// - the history entry when the frame says it ([`StoredHistory::FromFrame`])
///   and the frame is of a kind that has one ([`SAYS_HISTORY`]); an entry
///   of such a kind with no history says `"history":null`;
/// - a `tool_call`'s `arguments` when they are the frame's `args`, byte for
///   byte (the model's text is kept when it was written otherwise).
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
    out.push_str(FORMAT_3);
    let mut created_at = None;
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        // The fields written so far in this entry (a comma before the next).
        let mut fields = 0;
        let mut key = |out: &mut String, name: &str| {
            if fields > 0 {
                out.push(',');
            }
            fields += 1;
            out.push('"');
            out.push_str(name);
            out.push_str("\":");
        };
        let lead = Lead::of(&r.frame).filter(|l| l.seq == r.seq && l.kind == r.kind);
        if lead.is_none() {
            key(&mut out, "seq");
            out.push_str(itoa::Buffer::new().format(r.seq));
            key(&mut out, "kind");
            string(&mut out, r.kind);
        }
        let turn_said = matches!(
            (lead, r.turn_id.as_deref()),
            (Some(lead), Some(turn)) if lead.turn_id == Some(Some(turn))
        );
        if !turn_said {
            key(&mut out, "turn_id");
            match r.turn_id.as_deref() {
                Some(turn) => string(&mut out, turn),
                None => out.push_str("null"),
            }
        }
        if let Some(request_id) = r.request_id.as_deref() {
            key(&mut out, "request_id");
            string(&mut out, request_id);
        }
        if created_at != Some(r.created_at) {
            key(&mut out, "created_at");
            out.push_str(itoa::Buffer::new().format(r.created_at));
            created_at = Some(r.created_at);
        }
        key(&mut out, "frame");
        out.push_str(&r.frame);
        let mut json = |name: &str, value: &str| {
            key(&mut out, name);
            out.push_str(value);
        };
        if let Some(effect) = &r.effect {
            json("effect", effect);
        }
        let says_history = SAYS_HISTORY.contains(&r.kind);
        match &r.history {
            Some(StoredHistory::Json(text)) => json("history", text),
            Some(StoredHistory::FromFrame { arguments }) => {
                if !says_history {
                    json("history_from_frame", "true");
                }
                match arguments {
                    Some(a) if args_said(&r.frame, a) => {}
                    Some(a) => json("arguments", a),
                    None if r.kind == "tool_call" => json("arguments", "null"),
                    None => {}
                }
            }
            None if says_history => json("history", "null"),
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

/// The kinds of frame a history entry can be read from
/// ([`history_said`]).
const SAYS_HISTORY: [&str; 4] = ["turn_started", "tool_call", "tool_result", "turn_completed"];

/// Whether `frame` ends with `arguments` as its last field, `args`.
fn args_said(frame: &str, arguments: &str) -> bool {
    frame
        .strip_suffix('}')
        .and_then(|f| f.strip_suffix(arguments))
        .is_some_and(|f| f.ends_with(",\"args\":"))
}

/// How a body of the current format starts. Bodies of format 2 are an
/// object of the same shape whose entries say everything; bodies written
/// before that are a bare array of entries that hold their history and
/// action written out. Readers of bare arrays refuse an object as corrupt
/// rather than read it without the entries' history and action; readers
/// of format 2 refuse format 3 by its number.
const FORMAT_3: &str = "{\"format\":3,\"entries\":[";

/// Appends `s` as a JSON string. Ids, the common case, need no escaping
/// and are copied as they are.
fn string(out: &mut String, s: &str) {
    if plain(s) {
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

/// An entry as stored. In format 3 a key left out is read from the frame
/// (`seq`, `kind`, `turn_id`, a `tool_call`'s `arguments`), from the entry
/// before (`created_at`) or from the frame's kind (`history`); a key that
/// is there as `null` says there is none. In the formats before it, a key
/// left out or `null` says there is none.
#[derive(Deserialize)]
struct Stored<'a> {
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, deserialize_with = "present")]
    turn_id: Option<Option<TurnId>>,
    #[serde(default)]
    request_id: Option<RequestId>,
    #[serde(default)]
    created_at: Option<i64>,
    #[serde(borrow)]
    frame: &'a RawValue,
    #[serde(borrow, default)]
    effect: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    history: Option<Option<&'a RawValue>>,
    #[serde(borrow, default)]
    action: Option<&'a RawValue>,
    #[serde(default)]
    history_from_frame: bool,
    #[serde(borrow, default, deserialize_with = "present")]
    arguments: Option<Option<&'a RawValue>>,
    #[serde(borrow, default)]
    action_args: Option<&'a RawValue>,
}

/// A key that is there, `null` or not (`Some(None)` for `null`); a key
/// left out is `None` by `default`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
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

/// What a frame says that an entry, a history entry or an action is read
/// from.
#[derive(Deserialize)]
struct Said<'a> {
    #[serde(default)]
    seq: Option<u64>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    turn_id: Option<TurnId>,
    #[serde(default = "no_id")]
    call_id: CallId,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    status: String,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
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

/// The entries of a step's `body`, oldest first: bodies of formats 2 and
/// 3, and the bare arrays written before them.
pub(super) fn decode(body: &str) -> Result<Vec<Entry>, StorageError> {
    let corrupt = |e: serde_json::Error| StorageError::Corrupt(e.to_string());
    let (format, stored): (u64, Vec<Stored<'_>>) = if body.trim_start().starts_with('{') {
        let body: Body<'_> = serde_json::from_str(body).map_err(corrupt)?;
        super::formats::check(super::formats::Stored::Journal, body.format)?;
        if body.format < 2 {
            return Err(StorageError::Corrupt(format!(
                "a journal step object of format {}, which no version wrote",
                body.format
            )));
        }
        (body.format, body.entries)
    } else {
        (1, serde_json::from_str(body).map_err(corrupt)?)
    };
    let mut created_at = None;
    stored
        .into_iter()
        .map(|s| {
            let e = entry(s, format >= 3, created_at)?;
            created_at = Some(e.created_at);
            Ok(e)
        })
        .collect()
}

/// One stored entry read back; `lean`: of format 3, after an entry made
/// at `created_at`. The frame is read only for what the entry leaves to
/// it (so a frame an imported save brought, whose entry says everything,
/// is never parsed).
fn entry(s: Stored<'_>, lean: bool, created_at: Option<i64>) -> Result<Entry, StorageError> {
    let text = |v: Option<&RawValue>| v.map(|v| v.get().to_owned());
    let frame = s.frame;
    let parse = || {
        serde_json::from_str::<Said<'_>>(frame.get())
            .map_err(|e| StorageError::Corrupt(format!("frame {:?}: {e}", s.seq)))
    };
    let missing = |what: &str| StorageError::Corrupt(format!("an entry without its {what}"));
    let mut said = None;
    let (seq, kind, turn_id) =
        if lean && (s.seq.is_none() || s.kind.is_none() || s.turn_id.is_none()) {
            let from = parse()?;
            let seq = s.seq.or(from.seq).ok_or_else(|| missing("seq"))?;
            let kind = s.kind.or_else(|| from.kind.clone());
            let turn_id = s.turn_id.unwrap_or_else(|| from.turn_id.clone());
            said = Some(from);
            (seq, kind.ok_or_else(|| missing("kind"))?, turn_id)
        } else {
            (
                s.seq.ok_or_else(|| missing("seq"))?,
                s.kind.ok_or_else(|| missing("kind"))?,
                s.turn_id.flatten(),
            )
        };
    let created_at = match s.created_at {
        Some(at) => at,
        None if lean => created_at.ok_or_else(|| missing("time"))?,
        None => return Err(missing("time")),
    };
    let from_frame = s.history_from_frame
        || (lean && s.history.is_none() && SAYS_HISTORY.contains(&kind.as_str()));
    if (from_frame || s.action_args.is_some()) && said.is_none() {
        said = Some(parse()?);
    }
    let arguments = match (&said, s.arguments) {
        (_, Some(arguments)) => arguments,
        (Some(said), None) if lean => said.args,
        _ => None,
    };
    let history = match &said {
        Some(said) if from_frame => Some(history_said(seq, &kind, said, arguments)?),
        _ => text(s.history.flatten()),
    };
    let action = match (&said, s.action_args) {
        (Some(said), Some(args)) => {
            let result = said.result.ok_or_else(|| {
                StorageError::Corrupt(format!("frame {seq} has no result for its action"))
            })?;
            Some(json(&Applied {
                args,
                call_id: &said.call_id,
                result,
                status: &said.status,
                tool: &said.tool,
                turn_id: said.turn_id.as_deref().unwrap_or(""),
            })?)
        }
        _ => text(s.action),
    };
    Ok(Entry {
        seq,
        turn_id,
        request_id: s.request_id,
        created_at,
        frame: frame.get().to_owned(),
        effect: text(s.effect),
        history,
        action,
        kind,
    })
}

/// The history entry frame `seq` of `kind` says ([`StoredHistory::FromFrame`]),
/// as JSON text; a `tool_call`'s `arguments` are the model's text.
fn history_said(
    seq: u64,
    kind: &str,
    said: &Said<'_>,
    arguments: Option<&RawValue>,
) -> Result<String, StorageError> {
    let missing = || StorageError::Corrupt(format!("frame {seq} does not say its history entry"));
    let turn_id = said.turn_id.clone().unwrap_or_else(no_id);
    let entry = match kind {
        "turn_started" => HistoryEntry::User {
            turn_id,
            text: said.text.clone().ok_or_else(missing)?,
            seat_id: said.seat_id.clone(),
        },
        "tool_call" => HistoryEntry::ToolCall {
            turn_id,
            call_id: said.call_id.clone(),
            tool: said.tool.clone(),
            arguments: arguments.ok_or_else(missing)?.get().to_owned(),
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
            decode(&body.replacen("\"format\":3", "\"format\":4", 1)),
            Err(StorageError::NewerFormat {
                found: 4,
                newest: 3,
                ..
            })
        ));
        assert!(matches!(
            decode(&body.replacen("\"format\":3", "\"format\":1", 1)),
            Err(StorageError::Corrupt(m)) if m.contains("format 1")
        ));
    }

    /// A roll turn as format 2 stored it (a body a node of the version
    /// before wrote), and the rows it was written from.
    const FORMAT_2_TURN: &str = r#"{"format":2,"entries":[{"seq":2,"kind":"turn_started","turn_id":"turn_1","request_id":"r1","created_at":17,"frame":{"seq":2,"type":"turn_started","turn_id":"turn_1","request_id":"r1","actor_id":"pc_001","text":"roll 1d6","seat_id":"seat_1"},"effect":{"effect":"begin_turn","turn":1},"history_from_frame":true},{"seq":3,"kind":"tool_call","turn_id":"turn_1","created_at":17,"frame":{"seq":3,"type":"tool_call","turn_id":"turn_1","iteration":1,"call_id":"call_1","tool":"roll_dice","args":{"dice":"1d6"}},"history_from_frame":true,"arguments":{"dice":"1d6"}},{"seq":4,"kind":"tool_result","turn_id":"turn_1","created_at":18,"frame":{"seq":4,"type":"tool_result","turn_id":"turn_1","call_id":"call_1","tool":"roll_dice","status":"ok","result":{"rolls":[4],"total":4}},"history_from_frame":true,"action_args":{"dice":"1d6"}},{"seq":5,"kind":"narrative_delta","turn_id":"turn_1","created_at":18,"frame":{"seq":5,"type":"narrative_delta","turn_id":"turn_1","text":"You roll 4."}},{"seq":6,"kind":"turn_completed","turn_id":"turn_1","created_at":18,"frame":{"seq":6,"type":"turn_completed","turn_id":"turn_1","reply":"You roll 4."},"history_from_frame":true}]}"#;

    fn format_2_rows() -> Vec<JournalRow> {
        let body: Body<'_> = serde_json::from_str(FORMAT_2_TURN).unwrap();
        body.entries
            .into_iter()
            .map(|e| {
                let kind = e.kind.unwrap();
                let kind = SAYS_HISTORY
                    .into_iter()
                    .chain(["narrative_delta"])
                    .find(|k| *k == kind)
                    .unwrap();
                let raw = |v: Option<&RawValue>| v.map(|v| v.get().to_owned());
                JournalRow {
                    session_id: "s".into(),
                    seq: e.seq.unwrap(),
                    turn_id: e.turn_id.flatten(),
                    kind,
                    request_id: e.request_id,
                    frame: e.frame.get().into(),
                    effect: raw(e.effect),
                    history: e.history_from_frame.then(|| StoredHistory::FromFrame {
                        arguments: raw(e.arguments.flatten()),
                    }),
                    action: raw(e.action_args).map(|args| StoredAction::FromFrame { args }),
                    created_at: e.created_at.unwrap(),
                    timers: Vec::new(),
                }
            })
            .collect()
    }

    #[test]
    fn a_format_2_step_reads_as_it_always_did_and_as_format_3_writes_it() {
        let old = decode(FORMAT_2_TURN).unwrap();
        assert_eq!(old.len(), 5);
        let call: HistoryEntry = serde_json::from_str(old[1].history.as_deref().unwrap()).unwrap();
        assert!(
            matches!(&call, HistoryEntry::ToolCall { arguments, .. } if arguments == r#"{"dice":"1d6"}"#),
            "{call:?}"
        );
        assert_eq!(old[4].created_at, 18);
        let rows = format_2_rows();
        let refs: Vec<&JournalRow> = rows.iter().collect();
        let body = &group(&refs)[0].body;
        assert!(body.starts_with("{\"format\":3,"), "{body}");
        assert_eq!(decode(body).unwrap(), old, "{body}");
        // What format 3 leaves out: the kinds, the history markers, the
        // arguments the frame says, the times after the first of each.
        for gone in ["\"kind\"", "history_from_frame", "\"arguments\""] {
            assert!(!body.contains(gone), "{gone} in {body}");
        }
        assert_eq!(body.matches("\"created_at\"").count(), 2, "{body}");
        assert!(
            body.len() * 4 < FORMAT_2_TURN.len() * 3,
            "{} against {}",
            body.len(),
            FORMAT_2_TURN.len()
        );
    }

    #[test]
    fn what_a_frame_does_not_say_is_written_and_wins() {
        let mut rows = format_2_rows();
        // A row with no turn whose frame names none.
        rows[3].turn_id = None;
        // A frame that names another turn than its row.
        rows[4].frame =
            r#"{"seq":6,"type":"turn_completed","turn_id":"turn_9","reply":"x"}"#.into();
        // A frame whose head is not first.
        rows[0].frame = r#"{"type":"turn_started","seq":2,"turn_id":"turn_1","text":"hi"}"#.into();
        // A kind that says history, with none.
        rows[2].history = None;
        // Arguments that are not the frame's text.
        rows[1].history = Some(StoredHistory::FromFrame {
            arguments: Some(r#"{"dice": "1d6"}"#.into()),
        });
        for r in &rows {
            let back = &decode(&group(&[r])[0].body).unwrap()[0];
            assert_eq!(
                (back.seq, back.kind.as_str(), back.turn_id.as_deref()),
                (r.seq, r.kind, r.turn_id.as_deref()),
                "{}",
                r.frame
            );
        }
        // A frame an imported save brought, keys sorted and one of them
        // of a type no frame of questd's has: its entry says everything,
        // and the frame is not read.
        let imported = JournalRow {
            kind: "party_chat",
            turn_id: None,
            history: None,
            action: None,
            effect: None,
            request_id: None,
            frame: r#"{"seat_id":"seat_2","seq":9,"text":5,"type":"party_chat"}"#.into(),
            ..row("s", 9, None, "party_chat")
        };
        let back = &decode(&group(&[&imported])[0].body).unwrap()[0];
        assert_eq!(
            (back.seq, back.kind.as_str(), back.turn_id.as_deref()),
            (9, "party_chat", None)
        );
        assert_eq!(back.frame, &*imported.frame);
        let back = |i: usize| decode(&group(&[&rows[i]])[0].body).unwrap().remove(0);
        assert_eq!(back(2).history, None);
        assert!(back(2).action.is_some());
        let call: HistoryEntry = serde_json::from_str(&back(1).history.unwrap()).unwrap();
        assert!(
            matches!(&call, HistoryEntry::ToolCall { arguments, .. } if arguments == r#"{"dice": "1d6"}"#),
            "{call:?}"
        );
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
