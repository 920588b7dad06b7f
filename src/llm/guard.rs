//! The guard rules of one exchange with the model: when it has asked for
//! tools enough times, when a call counts as asked for again, and what an
//! answer without tool calls must hold.
//!
//! An exchange is a session's turn (`session/turn.rs`, which sees each call
//! as it runs) or the messages after the last `user` one of a conversation
//! sent to `POST /api/chat` (`http/stateless.rs`, which reads the same rules
//! from the history the client sends). Both ask these rules; what each does
//! once one trips (a closing model call, a corrective retry, a failed turn)
//! is theirs. Pure: no IO, tested from tables.
//!
//! The two read a repeat differently, as docs/protocol.md documents each
//! (§2.6 `turn_failed`, §1.10): a turn runs calls one at a time and stops
//! at the same call [`REPEAT_LIMIT`] times in a row ([`CallRun`]); a
//! stateless exchange has no run to watch, only the history, and stops at a
//! call it already answered ([`answered`], [`asked_twice`]). A turn's
//! closing answer need only have text (else the turn fails); a stateless
//! one keeps the whole contract, with the same one retry as any answer.

use std::collections::HashSet;

use serde_json::Value;

use super::contract::{self, ContractError, TurnFacts};

/// The same tool with the same arguments this many times in a row ends a
/// turn's tool calls.
pub const REPEAT_LIMIT: u32 = 3;

/// Whether the next model call of an exchange whose model answers asked
/// for tools `rounds` times is the last of its `max_iterations` (model
/// calls allowed in one turn; 0 is read as 1): it is then the closing
/// one, made without tools, so the exchange ends in a narrative within
/// its calls.
pub fn rounds_spent(rounds: usize, max_iterations: u32) -> bool {
    rounds + 1 >= max_iterations.max(1) as usize
}

/// Why a turn's last model call closes it without tools (or, after
/// `, and the closing narration …`, why the turn failed).
pub fn rounds_spent_message(max_iterations: u32) -> String {
    match max_iterations {
        0 | 1 => "a turn makes at most 1 model call, and it narrates without tools".into(),
        max => format!(
            "a turn makes at most {max} model calls and the model was still asking for tools: \
             the last call narrates without them"
        ),
    }
}

/// Arguments read as JSON, or the text when they are not JSON.
fn read(text: &str) -> Result<Value, &str> {
    serde_json::from_str(text).map_err(|_| text)
}

/// Whether the exchange's `calls` already hold a call of `tool` with
/// `arguments`. A stateless exchange writes each call's arguments from
/// their parsed value, keys sorted, so the same arguments are the same
/// text whatever order or spacing the client sent.
pub fn answered(calls: &[(String, String)], tool: &str, arguments: &str) -> bool {
    calls.iter().any(|(t, a)| t == tool && a == arguments)
}

/// Whether any call of the exchange's `calls` (as [`answered`] reads them)
/// was asked for twice. One pass: a client may send thousands of calls.
pub fn asked_twice(calls: &[(String, String)]) -> bool {
    let mut seen = HashSet::with_capacity(calls.len());
    !calls.iter().all(|call| seen.insert(call))
}

/// The run of the same call a turn is in: the last call and how many times
/// in a row it was asked for.
#[derive(Debug, Default)]
pub struct CallRun {
    last: Option<LastCall>,
    run: u32,
}

/// A turn's last call.
#[derive(Debug)]
struct LastCall {
    tool: String,
    arguments: String,
    /// `arguments` read as JSON (the text when it is not), once a call of
    /// the same tool needed them: most calls are never read here (the
    /// pipeline reads them as it runs them).
    read: Option<Result<Value, String>>,
}

impl CallRun {
    /// Notes the call about to run; true when it is the same call
    /// [`REPEAT_LIMIT`] times in a row, so it must not run. The same
    /// arguments in another key order or spacing are the same call: they
    /// are compared as JSON (text that is not JSON, as text).
    pub fn repeats(&mut self, tool: &str, arguments: &str) -> bool {
        let same = self.last.as_mut().is_some_and(|last| {
            last.tool == tool
                && (last.arguments == arguments || {
                    let owned = |t: &str| read(t).map_err(str::to_owned);
                    let was = last.read.get_or_insert_with(|| owned(&last.arguments));
                    *was == owned(arguments)
                })
        });
        if same {
            self.run += 1;
        } else {
            self.last = Some(LastCall {
                tool: tool.to_owned(),
                arguments: arguments.to_owned(),
                read: None,
            });
            self.run = 1;
        }
        self.run >= REPEAT_LIMIT
    }
}

/// What becomes of an answer without tool calls.
#[derive(Debug, Clone, PartialEq)]
pub enum Narration {
    /// It ends the exchange.
    Accept,
    /// It breaks the reply contract: it is sent back once, with the problem.
    SendBack(ContractError),
    /// It broke the contract after an answer was sent back: the model's
    /// fault (`INVALID_AI_JSON`).
    GiveUp(ContractError),
}

/// Judges an answer without tool calls by the reply contract
/// ([`contract::check_narration`]: not empty, no move claimed unless one
/// succeeded); `sent_back` says an earlier answer of this step was.
pub fn narration(text: &str, facts: TurnFacts, sent_back: bool) -> Narration {
    match contract::check_narration(text, facts) {
        Ok(()) => Narration::Accept,
        Err(problem) if sent_back => Narration::GiveUp(problem),
        Err(problem) => Narration::SendBack(problem),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_of_max_iterations_calls_is_the_closing_one() {
        // (rounds asked for tools, max_iterations, spent)
        let cases = [
            (0, 0, true),
            (0, 1, true),
            (0, 2, false),
            (1, 2, true),
            (6, 8, false),
            (7, 8, true),
            (8, 8, true),
        ];
        for (rounds, max, spent) in cases {
            assert_eq!(rounds_spent(rounds, max), spent, "{rounds} of {max}");
        }
        assert_eq!(rounds_spent_message(0), rounds_spent_message(1));
        assert!(rounds_spent_message(8).starts_with("a turn makes at most 8 model calls "));
    }

    #[test]
    fn a_call_answered_before_is_known() {
        let calls = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
                .collect()
        };
        let exchange = calls(&[("move", r#"{"to":"a","who":"x"}"#), ("roll_dice", "{}")]);
        assert!(answered(&exchange, "move", r#"{"to":"a","who":"x"}"#));
        assert!(!answered(&exchange, "move", r#"{"to":"b","who":"x"}"#));
        assert!(!answered(
            &exchange,
            "move_options",
            r#"{"to":"a","who":"x"}"#
        ));
        // (calls of the exchange, one asked for twice)
        let cases = [
            (calls(&[]), false),
            (calls(&[("move", "{}"), ("roll_dice", "{}")]), false),
            (
                calls(&[("move", r#"{"a":1}"#), ("move", r#"{"a":2}"#)]),
                false,
            ),
            (
                calls(&[("move", "{}"), ("roll_dice", "{}"), ("move", "{}")]),
                true,
            ),
        ];
        for (exchange, twice) in cases {
            assert_eq!(asked_twice(&exchange), twice, "{exchange:?}");
        }
    }

    #[test]
    fn the_same_call_three_times_in_a_row_is_a_repeat() {
        // Calls in order, and whether each may not run.
        let cases: &[&[(&str, &str, bool)]] = &[
            &[
                ("move", "{}", false),
                ("move", "{}", false),
                ("move", "{}", true),
            ],
            &[
                ("move", r#"{"a":1,"b":2}"#, false),
                ("move", r#"{"b":2,"a":1}"#, false),
                ("move", r#"{ "a": 1, "b": 2 }"#, true),
            ],
            // Another call in between starts the run again.
            &[
                ("move", "{}", false),
                ("move", "{}", false),
                ("roll_dice", "{}", false),
                ("move", "{}", false),
                ("move", "{}", false),
                ("move", "{}", true),
            ],
            &[
                ("move", "{}", false),
                ("look", "{}", false),
                ("move", "{}", false),
            ],
            // Text that is not JSON compares as text.
            &[
                ("move", "x", false),
                ("move", "x", false),
                ("move", "x", true),
            ],
            &[
                ("move", "x", false),
                ("move", "x", false),
                ("move", "y", false),
            ],
            &[
                ("move", "{}", false),
                ("move", "{ }", false),
                ("move", "{bad", false),
            ],
        ];
        for calls in cases {
            let mut run = CallRun::default();
            for (tool, args, stop) in calls.iter() {
                assert_eq!(run.repeats(tool, args), *stop, "{calls:?}");
            }
        }
    }

    #[test]
    fn an_answer_that_breaks_the_contract_is_sent_back_once() {
        let moved = TurnFacts {
            moved: true,
            wrap_up: false,
        };
        let still = TurnFacts {
            moved: false,
            wrap_up: false,
        };
        let claim = "You arrive at the gate.";
        let kind = |n: Narration| match n {
            Narration::Accept => "accept",
            Narration::SendBack(_) => "send back",
            Narration::GiveUp(_) => "give up",
        };
        // (text, facts, sent back before, what becomes of it)
        let cases = [
            ("The gate creaks.", still, false, "accept"),
            ("The gate creaks.", still, true, "accept"),
            ("  ", still, false, "send back"),
            ("", moved, true, "give up"),
            (claim, still, false, "send back"),
            (claim, still, true, "give up"),
            (claim, moved, false, "accept"),
        ];
        for (text, facts, sent_back, expected) in cases {
            assert_eq!(
                kind(narration(text, facts, sent_back)),
                expected,
                "{text:?} {facts:?} {sent_back}"
            );
        }
    }
}
