//! Approval of tool calls (docs/protocol.md §19): which of the game
//! master's calls wait for a person's decision, and the approvals a
//! session holds, as part of its save state.
//!
//! A campaign (or the session's creation body) names the tools in its
//! [`ApprovalRule`]. A call of one that passes every check of the pipeline
//! is not run: its turn journals [`super::Effect::ApprovalRequested`] with
//! the exact arguments and pauses. The decision journals
//! [`super::Effect::ApprovalResolved`]; on `approve` the call runs with the
//! arguments stored here (a decision names the approval, never arguments),
//! on `deny` or `timeout` the model is told `APPROVAL_DENIED`. Both effects
//! are folded here, so a restart or another node reads the pending
//! approvals from the journal like everything else. Nothing here reads a
//! clock: every time is given.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{CallId, CharacterId, SeatId, TurnId};

/// The shortest and longest time an approval waits, in seconds.
pub const MIN_TIMEOUT_S: u32 = 10;
pub const MAX_TIMEOUT_S: u32 = 86_400;
/// How long an approval waits when the rule names no timeout, in seconds.
pub const DEFAULT_TIMEOUT_S: u32 = 600;
/// Most tools one rule names.
pub const MAX_RULE_TOOLS: usize = 64;
/// Longest reason a person gives with a decision, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Resolved approvals remembered, so a late second decision is told
/// `CONFLICT` rather than `NOT_FOUND`.
pub const REMEMBERED_RESOLVED: usize = 64;
/// Most characters of an unknown tool name a problem repeats (every tool
/// name is shorter, so a cut name is still unknown).
const MAX_SHOWN_NAME_CHARS: usize = 64;
/// The prefix of an approval's entry in the store's timer index.
pub const TIMER_PREFIX: &str = "approval:";

/// Which of the game master's calls wait for a person (`"approval"` in a
/// campaign or a creation body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRule {
    /// The tools whose calls wait for a decision.
    pub tools: Vec<String>,
    /// How long a request waits before it is denied with `timeout`.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u32,
    /// When set, an `hp_delta` among `tools` waits only when it would bring
    /// a player character from above 0 HP to 0 or below; the other tools
    /// named always wait (questd's extension, docs/protocol.md §19).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lethal_only: bool,
}

fn default_timeout_s() -> u32 {
    DEFAULT_TIMEOUT_S
}

impl ApprovalRule {
    /// Reads and checks an `"approval"` block: the problems found, each a
    /// short sentence, naming its place as `at` (`approval`). Tools must be
    /// among `tools` (the registry's names).
    pub fn from_value(value: &Value, tools: &[&str], at: &str) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let Value::Object(fields) = value else {
            return Err(vec![format!(
                "{at} must be an object {{\"tools\":[...],\"timeout_s\":{DEFAULT_TIMEOUT_S}}}"
            )]);
        };
        let mut names: Vec<String> = Vec::new();
        match fields.get("tools") {
            Some(Value::Array(list)) if list.len() <= MAX_RULE_TOOLS => {
                for (i, t) in list.iter().enumerate() {
                    match t.as_str() {
                        Some(name) if tools.contains(&name) => {
                            if !names.iter().any(|n| n == name) {
                                names.push(name.to_owned());
                            }
                        }
                        // Cut here: `game` imports nothing above it.
                        Some(name) => problems.push(format!(
                            "{at}.tools[{i}]: no tool {:?}",
                            name.chars().take(MAX_SHOWN_NAME_CHARS).collect::<String>()
                        )),
                        None => problems.push(format!("{at}.tools[{i}] must be a tool name")),
                    }
                }
            }
            Some(Value::Array(_)) => {
                problems.push(format!("{at}.tools names at most {MAX_RULE_TOOLS} tools"))
            }
            Some(_) => problems.push(format!("{at}.tools must be a list of tool names")),
            None => problems.push(format!("{at} needs \"tools\", a list of tool names")),
        }
        let timeout_s = match fields.get("timeout_s") {
            None | Some(Value::Null) => DEFAULT_TIMEOUT_S,
            Some(v) => match v.as_u64() {
                Some(s) if (u64::from(MIN_TIMEOUT_S)..=u64::from(MAX_TIMEOUT_S)).contains(&s) => {
                    s as u32
                }
                _ => {
                    problems.push(format!(
                        "{at}.timeout_s must be a whole number of seconds from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S}"
                    ));
                    DEFAULT_TIMEOUT_S
                }
            },
        };
        let lethal_only = match fields.get("lethal_only") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                problems.push(format!("{at}.lethal_only must be true or false"));
                false
            }
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Self {
            tools: names,
            timeout_s,
            lethal_only,
        })
    }

    /// The rule with each tool named once.
    pub fn deduped(mut self) -> Self {
        let mut seen = std::collections::HashSet::new();
        self.tools.retain(|t| seen.insert(t.clone()));
        self
    }
}

/// How an approval was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
    /// Nobody decided within the rule's `timeout_s`.
    Timeout,
}

/// A call waiting for a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub approval_id: String,
    pub turn_id: TurnId,
    pub call_id: CallId,
    pub tool: String,
    /// Exactly the arguments the call runs with, once approved.
    pub args: Value,
    /// The seat whose turn it is (`None` for a turn no seat asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat_id: Option<SeatId>,
    /// The characters the turn acts for: the call runs acting for them.
    #[serde(default)]
    pub acting: Vec<CharacterId>,
    /// The model call of the turn that asked for it.
    pub iteration: u32,
    /// When it was asked for and when it times out (ms since the epoch).
    pub requested_at: i64,
    pub expires_at: i64,
}

impl Approval {
    /// Its entry in the store's timer index.
    pub fn timer_id(&self) -> String {
        timer_id(&self.approval_id)
    }
}

/// The timer index entry of approval `approval_id`.
pub fn timer_id(approval_id: &str) -> String {
    format!("{TIMER_PREFIX}{approval_id}")
}

/// A decision taken on an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    pub approval: Approval,
    pub decision: Decision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_seat_id: Option<SeatId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the decided call's result is journalled: the call ran (or
    /// was refused), and a session loaded again must not carry the
    /// decision out a second time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried_out: bool,
}

/// What a session holds of approvals: its rule, the approvals pending, the
/// last decision (its call's result may not be journalled yet) and the ids
/// of the last ones resolved. The rule and the last decision are boxed:
/// every session's state holds this, and few sessions have either.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Approvals {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Box<ApprovalRule>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Approval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Box<Resolved>>,
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub resolved: VecDeque<String>,
}

impl Approvals {
    /// Whether there is nothing to store (no rule, nothing pending or
    /// remembered).
    pub fn is_empty(&self) -> bool {
        self.rule.is_none()
            && self.pending.is_empty()
            && self.last.is_none()
            && self.resolved.is_empty()
    }

    /// The pending approval `approval_id`.
    pub fn pending(&self, approval_id: &str) -> Option<&Approval> {
        self.pending.iter().find(|a| a.approval_id == approval_id)
    }

    /// Whether `approval_id` was resolved (lately).
    pub fn was_resolved(&self, approval_id: &str) -> bool {
        self.resolved.iter().any(|id| id == approval_id)
    }

    /// The soonest time a pending approval times out.
    pub fn next_expiry(&self) -> Option<i64> {
        self.pending.iter().map(|a| a.expires_at).min()
    }

    pub(super) fn requested(&mut self, approval: &Approval) {
        if self.pending(&approval.approval_id).is_none() {
            self.pending.push(approval.clone());
        }
    }

    pub(super) fn resolved(
        &mut self,
        approval_id: &str,
        decision: Decision,
        by_seat_id: Option<&SeatId>,
        reason: Option<&String>,
    ) {
        let Some(at) = self
            .pending
            .iter()
            .position(|a| a.approval_id == approval_id)
        else {
            return;
        };
        let approval = self.pending.remove(at);
        self.resolved.push_back(approval.approval_id.clone());
        while self.resolved.len() > REMEMBERED_RESOLVED {
            self.resolved.pop_front();
        }
        self.last = Some(Box::new(Resolved {
            approval,
            decision,
            by_seat_id: by_seat_id.cloned(),
            reason: reason.cloned(),
            carried_out: false,
        }));
    }

    /// The result of `turn_id`'s call `call_id` is journalled: if it is the
    /// last decided call's, that decision is carried out.
    pub fn result_recorded(&mut self, turn_id: &TurnId, call_id: &CallId) {
        if let Some(last) = self.last.as_mut()
            && last.approval.turn_id == *turn_id
            && last.approval.call_id == *call_id
        {
            last.carried_out = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TOOLS: [&str; 3] = ["hp_delta", "move", "update_character"];

    #[test]
    fn a_rule_is_read_with_its_defaults_and_refused_with_every_problem() {
        let rule = ApprovalRule::from_value(
            &json!({"tools": ["hp_delta", "hp_delta", "move"]}),
            &TOOLS,
            "approval",
        )
        .unwrap();
        assert_eq!(rule.tools, ["hp_delta", "move"]);
        assert_eq!(rule.timeout_s, DEFAULT_TIMEOUT_S);
        assert!(!rule.lethal_only);
        let problems = ApprovalRule::from_value(
            &json!({"tools": ["nope", 3], "timeout_s": 5, "lethal_only": "yes"}),
            &TOOLS,
            "approval",
        )
        .unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("no tool \"nope\""));
        let long = "x".repeat(500);
        let cut =
            ApprovalRule::from_value(&json!({"tools": [long]}), &TOOLS, "approval").unwrap_err();
        assert_eq!(
            cut,
            [format!("approval.tools[0]: no tool {:?}", "x".repeat(64))],
            "an unknown name is repeated cut"
        );
        assert!(problems[2].contains("10 to 86400"));
        assert!(ApprovalRule::from_value(&json!([]), &TOOLS, "approval").is_err());
        assert!(ApprovalRule::from_value(&json!({}), &TOOLS, "approval").is_err());
        let many: Vec<&str> = std::iter::repeat_n("move", MAX_RULE_TOOLS + 1).collect();
        assert!(ApprovalRule::from_value(&json!({"tools": many}), &TOOLS, "approval").is_err());
    }

    #[test]
    fn a_lethal_only_rule_asks_only_for_a_blow_that_fells_a_player_character() {
        let state = crate::tools::test_support::demo();
        let hero = state.active_actor_id.clone();
        let hp = state.character(&hero).expect("the hero").hp;
        let npc = state
            .characters
            .iter()
            .find(|c| c.kind != "pc")
            .expect("an npc")
            .clone();
        let rule = ApprovalRule {
            tools: vec!["hp_delta".into(), "move".into()],
            timeout_s: 60,
            lethal_only: true,
        };
        let blow = |who: &str, delta: i64| json!({"target_character_id": who, "delta": delta});
        assert!(rule.asks("hp_delta", &blow(hero.as_str(), -hp), &state));
        assert!(!rule.asks("hp_delta", &blow(hero.as_str(), 1 - hp), &state));
        assert!(!rule.asks("hp_delta", &blow(npc.character_id.as_str(), -999), &state));
        assert!(
            rule.asks("move", &json!({}), &state),
            "other tools always ask"
        );
        assert!(!rule.asks("roll_dice", &json!({}), &state));
        let always = ApprovalRule {
            lethal_only: false,
            ..rule
        };
        assert!(always.asks("hp_delta", &blow(hero.as_str(), -1), &state));
    }

    #[test]
    fn a_resolved_approval_leaves_the_pending_list_and_is_remembered() {
        let approval = |n: usize| Approval {
            approval_id: format!("apr_{n}"),
            turn_id: "turn_1".into(),
            call_id: "call_1".into(),
            tool: "move".into(),
            args: json!({}),
            seat_id: None,
            acting: vec![],
            iteration: 1,
            requested_at: 0,
            expires_at: 10_000 + n as i64,
        };
        let mut book = Approvals::default();
        book.requested(&approval(1));
        book.requested(&approval(1));
        book.requested(&approval(2));
        assert_eq!(book.pending.len(), 2);
        assert_eq!(book.next_expiry(), Some(10_001));
        book.resolved("apr_1", Decision::Deny, None, None);
        assert!(book.pending("apr_1").is_none());
        assert!(book.was_resolved("apr_1"));
        assert_eq!(book.last.as_ref().map(|l| l.decision), Some(Decision::Deny));
        for n in 3..(3 + REMEMBERED_RESOLVED) {
            book.requested(&approval(n));
            book.resolved(&format!("apr_{n}"), Decision::Approve, None, None);
        }
        assert!(!book.was_resolved("apr_1"), "only the last ones are kept");
        let last = |b: &Approvals| b.last.as_ref().map(|l| l.carried_out);
        assert_eq!(last(&book), Some(false));
        book.result_recorded(&"turn_1".into(), &"call_9".into());
        assert_eq!(last(&book), Some(false), "another call's result");
        book.result_recorded(&"turn_1".into(), &"call_1".into());
        assert_eq!(last(&book), Some(true), "its own");
        assert_eq!(book.resolved.len(), REMEMBERED_RESOLVED);
    }
}
