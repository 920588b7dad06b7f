//! The chat history as a model may read it.
//!
//! A session's history is a flat list of entries; a model endpoint wants
//! each tool call next to its result and refuses a result without its call
//! (or, natively, a call without a result). [`steps`] turns the list into
//! steps that keep exactly the calls that were answered, so every provider
//! renders the same conversation.

use crate::game::HistoryEntry;

/// One step of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<'a> {
    /// What the player wrote.
    User(&'a str),
    /// The game master's narration.
    Assistant(&'a str),
    /// Tool calls the model made together, each with its result; never
    /// empty.
    Calls(Vec<Exchange<'a>>),
}

/// A tool call and the result that answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange<'a> {
    pub call_id: &'a str,
    pub tool: &'a str,
    /// The arguments as the model wrote them (raw JSON text).
    pub arguments: &'a str,
    /// The result as the model reads it (JSON text).
    pub content: &'a str,
}

/// The history as steps. Consecutive tool calls form one group, answered
/// by the results that follow them; a result whose call is not in the group
/// before it is dropped, as is a second result for the same call, a repeated
/// call id, and a call that got no result (the group too, if none did).
/// Results keep the order they arrived in.
pub fn steps<E: AsRef<HistoryEntry>>(history: &[E]) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    // The open group: its calls `(id, tool, arguments)` and its exchanges.
    let mut calls: Vec<(&str, &str, &str)> = Vec::new();
    let mut answered: Vec<Exchange<'_>> = Vec::new();
    let mut previous_was_call = false;
    for entry in history {
        match entry.as_ref() {
            HistoryEntry::ToolCall {
                call_id,
                tool,
                arguments,
                ..
            } => {
                if !previous_was_call {
                    close(&mut calls, &mut answered, &mut out);
                }
                if !calls.iter().any(|(id, _, _)| id == call_id) {
                    calls.push((call_id, tool, arguments));
                }
                previous_was_call = true;
                continue;
            }
            HistoryEntry::ToolResult {
                call_id, content, ..
            } => {
                let call = calls.iter().find(|(id, _, _)| id == call_id);
                let repeat = answered.iter().any(|e| e.call_id == call_id);
                if let (Some(&(call_id, tool, arguments)), false) = (call, repeat) {
                    answered.push(Exchange {
                        call_id,
                        tool,
                        arguments,
                        content,
                    });
                }
            }
            HistoryEntry::User { text, .. } => {
                close(&mut calls, &mut answered, &mut out);
                out.push(Step::User(text));
            }
            HistoryEntry::Assistant { text, .. } => {
                close(&mut calls, &mut answered, &mut out);
                out.push(Step::Assistant(text));
            }
        }
        previous_was_call = false;
    }
    close(&mut calls, &mut answered, &mut out);
    out
}

/// Ends the open group: its answered calls become one step.
fn close<'a>(
    calls: &mut Vec<(&'a str, &'a str, &'a str)>,
    answered: &mut Vec<Exchange<'a>>,
    out: &mut Vec<Step<'a>>,
) {
    calls.clear();
    if !answered.is_empty() {
        out.push(Step::Calls(std::mem::take(answered)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> HistoryEntry {
        HistoryEntry::User {
            turn_id: "t".into(),
            text: text.into(),
            seat_id: None,
        }
    }
    fn call(id: &str) -> HistoryEntry {
        HistoryEntry::ToolCall {
            turn_id: "t".into(),
            call_id: id.into(),
            tool: "roll_dice".into(),
            arguments: "{}".into(),
        }
    }
    fn result(id: &str) -> HistoryEntry {
        HistoryEntry::ToolResult {
            turn_id: "t".into(),
            call_id: id.into(),
            tool: "roll_dice".into(),
            content: format!("r{id}"),
        }
    }
    fn gm(text: &str) -> HistoryEntry {
        HistoryEntry::Assistant {
            turn_id: "t".into(),
            text: text.into(),
        }
    }

    /// Steps in short form: `u`, `a`, or the answered call ids.
    fn shape(history: &[HistoryEntry]) -> Vec<String> {
        steps(history)
            .iter()
            .map(|s| match s {
                Step::User(_) => "u".to_owned(),
                Step::Assistant(_) => "a".to_owned(),
                Step::Calls(ex) => ex.iter().map(|e| e.call_id).collect::<Vec<_>>().join("+"),
            })
            .collect()
    }

    #[test]
    fn calls_are_kept_only_with_their_results() {
        let cases: [(&str, Vec<HistoryEntry>, Vec<&str>); 7] = [
            (
                "pairs",
                vec![user("x"), call("1"), result("1"), gm("y")],
                vec!["u", "1", "a"],
            ),
            (
                "two calls, results in another order",
                vec![call("1"), call("2"), result("2"), result("1")],
                vec!["2+1"],
            ),
            ("orphan result", vec![user("x"), result("9")], vec!["u"]),
            (
                "unanswered call",
                vec![call("1"), call("2"), result("2")],
                vec!["2"],
            ),
            ("nothing answered", vec![call("1"), user("x")], vec!["u"]),
            (
                "a result from an earlier group",
                vec![call("1"), result("1"), call("2"), result("1"), result("2")],
                vec!["1", "2"],
            ),
            (
                "repeats",
                vec![call("1"), call("1"), result("1"), result("1")],
                vec!["1"],
            ),
        ];
        for (name, history, want) in cases {
            assert_eq!(shape(&history), want, "{name}");
        }
        let history = [call("1"), result("1")];
        let Step::Calls(ex) = &steps(&history)[0] else {
            panic!("a call step")
        };
        assert_eq!(
            ex[0],
            Exchange {
                call_id: "1",
                tool: "roll_dice",
                arguments: "{}",
                content: "r1"
            }
        );
    }
}
