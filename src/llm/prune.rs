//! Cutting a session's chat history down to a token budget.
//!
//! The history is split into turns; the oldest whole turns are dropped until
//! what is left, plus a short plain-text summary of what was dropped, fits the
//! budget. Token counts are estimates (see [`estimate_tokens`]), not the
//! model's own tokenizer.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde_json::Value;

use crate::game::HistoryEntry;

/// Tokens a message costs on top of its text (role, separators).
const MESSAGE_OVERHEAD: usize = 4;

/// How many characters of a player or game master text the summary quotes.
const SUMMARY_TEXT_CHARS: usize = 80;

/// How many characters of a tool name the summary quotes.
const SUMMARY_TOOL_CHARS: usize = 40;

/// How many tool calls one summary line lists before `+N more`.
const SUMMARY_MAX_TOOLS: usize = 8;

/// The first line of every summary.
const SUMMARY_HEADER: &str = "Earlier turns, oldest first:";

/// A rough token count of `text`.
///
/// The rule: every 4 bytes of ASCII count as one token (rounded up), and
/// every non-ASCII character counts as one token on its own, since CJK text
/// runs at about one token per character. Empty text is 0 tokens; any other
/// text is at least 1.
pub fn estimate_tokens(text: &str) -> usize {
    Counts::of(text).tokens()
}

/// Tokens `entry` costs when sent: the text the model sees (message text,
/// tool name, arguments, result content, call id) plus a small fixed
/// per-message overhead. The turn id is not sent and not counted.
pub fn entry_tokens(entry: &HistoryEntry) -> usize {
    let counts = match entry {
        HistoryEntry::User { text, .. } | HistoryEntry::Assistant { text, .. } => Counts::of(text),
        HistoryEntry::ToolCall {
            call_id,
            tool,
            arguments,
            ..
        } => Counts::of(call_id)
            .plus(Counts::of(tool))
            .plus(Counts::of(arguments)),
        HistoryEntry::ToolResult {
            call_id, content, ..
        } => Counts::of(call_id).plus(Counts::of(content)),
    };
    counts.tokens() + MESSAGE_OVERHEAD
}

/// The history cut to fit a budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned<E = HistoryEntry> {
    /// The entries to send, oldest first.
    pub entries: Vec<E>,
    /// A short plain-text summary of the turns that were dropped, for the
    /// system prompt; `None` when nothing was dropped (or when not even a
    /// one-line note fits in what is left of the budget).
    pub summary: Option<String>,
    /// How many whole turns were dropped; a leading piece of a turn (a
    /// history that starts mid-turn) counts as one.
    pub dropped_turns: usize,
}

/// Keeps the newest whole turns of `entries` that fit in `budget_tokens`.
///
/// Turns are groups of entries in order: a group starts at every `User`
/// entry and wherever the turn id changes; everything before the first
/// `User` entry (a turn whose start was already dropped) is one group, and
/// the first to go. Groups are never split, and the kept entries are always a
/// suffix of `entries`.
///
/// - The last group (the turn being played) is always kept whole, even when
///   it alone is over the budget.
/// - A kept `ToolResult` always has its `ToolCall` earlier in the kept
///   entries, and a kept `ToolCall` its `ToolResult` later, except in the
///   last group, where a result may still be coming. A group that would break
///   this (such as a leading piece of a turn that starts with a result) is
///   dropped together with everything before it, even when it would fit.
/// - The summary describes the dropped groups, oldest first, one line each:
///   `- player: "go to the hall" -> move ok, roll_dice ok -> gm: "You step
///   into the hall..."`, texts cut to about 80 characters. A tool's status is
///   `error` or `rejected` when its result is a JSON object with that
///   `"status"`, `no result` when it never got one, and `ok` otherwise.
/// - The summary is capped at a quarter of the budget: its oldest lines go
///   first, replaced by a note of how many earlier turns were omitted. Its
///   tokens count against the budget, so the kept entries plus the summary
///   fit whenever the last group fits on its own; when the last group is
///   over the budget, no summary is given.
///
/// A budget of 0 means no limit: everything is kept and the summary is
/// `None`.
pub fn prune<E: AsRef<HistoryEntry>>(mut entries: Vec<E>, budget_tokens: usize) -> Pruned<E> {
    if budget_tokens == 0 || entries.is_empty() {
        return Pruned {
            entries,
            summary: None,
            dropped_turns: 0,
        };
    }
    let groups = group_ranges(&entries);
    let last = groups.len() - 1;
    // kept[s]: tokens of the groups s.. (kept[groups.len()] = 0).
    let mut kept = vec![0usize; groups.len() + 1];
    for (s, range) in groups.iter().enumerate().rev() {
        let cost: usize = entries[range.clone()]
            .iter()
            .map(|e| entry_tokens(e.as_ref()))
            .sum();
        kept[s] = kept[s + 1] + cost;
    }
    let valid = valid_starts(&entries, &groups);
    if kept[0] <= budget_tokens && valid[0] {
        // Everything fits: nothing to drop or summarize.
        return Pruned {
            entries,
            summary: None,
            dropped_turns: 0,
        };
    }
    let lines: Vec<SummaryLine> = groups[..last]
        .iter()
        .map(|range| SummaryLine::new(turn_line(&entries[range.clone()])))
        .collect();

    let cap = budget_tokens / 4;
    let chosen = (0..=last).find_map(|s| {
        if kept[s] > budget_tokens || !(valid[s] || s == last) {
            return None;
        }
        let plan = plan_summary(&lines[..s], cap);
        let cost = plan.map_or(0, |p| p.tokens);
        (kept[s] + cost <= budget_tokens).then_some((s, plan))
    });
    let (start, plan) = chosen.unwrap_or_else(|| {
        // Only the last turn is left; the summary gets what room remains.
        let room = cap.min(budget_tokens.saturating_sub(kept[last]));
        (last, plan_summary(&lines[..last], room))
    });

    let summary = plan.map(|p| render_summary(&lines[..start], p.shown));
    let kept_entries = entries.split_off(groups[start].start);
    Pruned {
        entries: kept_entries,
        summary,
        dropped_turns: start,
    }
}

/// ASCII bytes and non-ASCII characters of a text; token estimates add up
/// exactly through these, which rounding per piece would not.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    ascii: usize,
    other: usize,
}

impl Counts {
    fn of(text: &str) -> Self {
        let mut counts = Self::default();
        for &b in text.as_bytes() {
            if b.is_ascii() {
                counts.ascii += 1;
            } else if b & 0xC0 != 0x80 {
                // A leading byte: one per non-ASCII character.
                counts.other += 1;
            }
        }
        counts
    }

    fn plus(self, rhs: Self) -> Self {
        Self {
            ascii: self.ascii + rhs.ascii,
            other: self.other + rhs.other,
        }
    }

    fn tokens(self) -> usize {
        self.ascii.div_ceil(4) + self.other
    }
}

fn turn_id(entry: &HistoryEntry) -> &str {
    match entry {
        HistoryEntry::User { turn_id, .. }
        | HistoryEntry::ToolCall { turn_id, .. }
        | HistoryEntry::ToolResult { turn_id, .. }
        | HistoryEntry::Assistant { turn_id, .. } => turn_id,
    }
}

/// Splits the history into turns (see [`prune`]); never empty for a
/// non-empty history, and the ranges cover it in order.
fn group_ranges<E: AsRef<HistoryEntry>>(entries: &[E]) -> Vec<Range<usize>> {
    let mut starts = Vec::new();
    let mut seen_user = false;
    for (i, entry) in entries.iter().enumerate() {
        let entry = entry.as_ref();
        let is_user = matches!(entry, HistoryEntry::User { .. });
        let new_group =
            i == 0 || is_user || (seen_user && turn_id(entry) != turn_id(entries[i - 1].as_ref()));
        seen_user |= is_user;
        if new_group {
            starts.push(i);
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(g, &start)| start..starts.get(g + 1).copied().unwrap_or(entries.len()))
        .collect()
}

/// For every group, whether the history may be cut just before it: no kept
/// result would lose its call, and no kept call outside the last group would
/// lose (or lack) its result.
fn valid_starts<E: AsRef<HistoryEntry>>(entries: &[E], groups: &[Range<usize>]) -> Vec<bool> {
    let last_start = groups.last().map_or(0, |g| g.start);
    // blocked[i] > 0: cutting just before entry i breaks a pair. Built as a
    // difference array of blocked ranges of cut positions.
    let mut diff = vec![0isize; entries.len() + 1];
    let mut block = |range: Range<usize>| {
        diff[range.start] += 1;
        diff[range.end] -= 1;
    };
    let mut latest_call: HashMap<&str, usize> = HashMap::new();
    for (j, entry) in entries.iter().enumerate() {
        match entry.as_ref() {
            HistoryEntry::ToolCall { call_id, .. } => {
                latest_call.insert(call_id.as_str(), j);
            }
            // A cut after the call (or anywhere, without one) and at or
            // before the result leaves the result alone.
            HistoryEntry::ToolResult { call_id, .. } => match latest_call.get(call_id.as_str()) {
                Some(&k) => block(k + 1..j + 1),
                None => block(0..j + 1),
            },
            _ => {}
        }
    }
    let mut answered: HashSet<&str> = HashSet::new();
    for (k, entry) in entries.iter().enumerate().rev() {
        match entry.as_ref() {
            HistoryEntry::ToolResult { call_id, .. } => {
                answered.insert(call_id.as_str());
            }
            HistoryEntry::ToolCall { call_id, .. }
                if k < last_start && !answered.contains(call_id.as_str()) =>
            {
                block(0..k + 1);
            }
            _ => {}
        }
    }
    let mut blocked = Vec::with_capacity(entries.len());
    let mut running = 0isize;
    for d in &diff[..entries.len()] {
        running += d;
        blocked.push(running > 0);
    }
    groups.iter().map(|g| !blocked[g.start]).collect()
}

/// Whitespace collapsed to single spaces, cut to at most `max_chars`
/// characters (on a character boundary) with `...` when anything was cut.
fn clip(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in text.split_whitespace() {
        for ch in (!out.is_empty())
            .then_some(' ')
            .into_iter()
            .chain(word.chars())
        {
            if chars == max_chars {
                let trimmed = out.trim_end().len();
                out.truncate(trimmed);
                out.push_str("...");
                return out;
            }
            out.push(ch);
            chars += 1;
        }
    }
    out
}

/// `ok`, or the failure status a tool result's content reports.
fn result_status(content: &str) -> &'static str {
    let status = serde_json::from_str::<Value>(content)
        .ok()
        .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned));
    match status.as_deref() {
        Some("error") => "error",
        Some("rejected") => "rejected",
        _ => "ok",
    }
}

/// One summary line for a dropped turn.
fn turn_line<E: AsRef<HistoryEntry>>(turn: &[E]) -> String {
    let mut line = String::from("- ");
    let player = turn.iter().find_map(|e| match e.as_ref() {
        HistoryEntry::User { text, .. } => Some(text),
        _ => None,
    });
    match player {
        Some(text) => {
            line.push_str("player: \"");
            line.push_str(&clip(text, SUMMARY_TEXT_CHARS));
            line.push('"');
        }
        None => line.push_str("(turn already under way)"),
    }

    let mut tools = Vec::new();
    for (i, entry) in turn.iter().enumerate() {
        match entry.as_ref() {
            HistoryEntry::ToolResult { tool, content, .. } => {
                tools.push(format!(
                    "{} {}",
                    clip(tool, SUMMARY_TOOL_CHARS),
                    result_status(content)
                ));
            }
            HistoryEntry::ToolCall { call_id, tool, .. } => {
                let answered = turn[i + 1..].iter().any(
                    |e| matches!(e.as_ref(), HistoryEntry::ToolResult { call_id: c, .. } if c == call_id),
                );
                if !answered {
                    tools.push(format!("{} no result", clip(tool, SUMMARY_TOOL_CHARS)));
                }
            }
            _ => {}
        }
    }
    if !tools.is_empty() {
        line.push_str(" -> ");
        let more = tools.len().saturating_sub(SUMMARY_MAX_TOOLS);
        tools.truncate(SUMMARY_MAX_TOOLS);
        line.push_str(&tools.join(", "));
        if more > 0 {
            line.push_str(&format!(", +{more} more"));
        }
    }

    let gm = turn.iter().rev().find_map(|e| match e.as_ref() {
        HistoryEntry::Assistant { text, .. } => Some(text),
        _ => None,
    });
    if let Some(text) = gm {
        line.push_str(" -> gm: \"");
        line.push_str(&clip(text, SUMMARY_TEXT_CHARS));
        line.push('"');
    }
    line
}

/// A summary line and its size, the newline before it included.
struct SummaryLine {
    text: String,
    counts: Counts,
}

impl SummaryLine {
    fn new(text: String) -> Self {
        let counts = Counts::of(&text).plus(Counts { ascii: 1, other: 0 });
        Self { text, counts }
    }
}

/// How much of a summary fits: the newest `shown` lines, and its tokens.
#[derive(Debug, Clone, Copy)]
struct SummaryPlan {
    shown: usize,
    tokens: usize,
}

/// The note that stands for `omitted` lines left out of a summary.
fn omitted_note(omitted: usize) -> String {
    let plural = if omitted == 1 { "" } else { "s" };
    format!("- ({omitted} earlier turn{plural} omitted)")
}

/// Counts of everything but the lines: header, and the note if any.
fn frame_counts(omitted: usize) -> Counts {
    let header = Counts::of(SUMMARY_HEADER);
    if omitted == 0 {
        header
    } else {
        header
            .plus(Counts::of(&omitted_note(omitted)))
            .plus(Counts { ascii: 1, other: 0 })
    }
}

/// The largest summary of `lines` that fits in `cap` tokens, or `None` when
/// there is nothing to summarize or not even the header and note fit.
fn plan_summary(lines: &[SummaryLine], cap: usize) -> Option<SummaryPlan> {
    if lines.is_empty() {
        return None;
    }
    let mut best = None;
    let mut body = Counts::default();
    for shown in 0..=lines.len() {
        if shown > 0 {
            body = body.plus(lines[lines.len() - shown].counts);
        }
        // Lines only grow; once they alone are over, more cannot fit.
        if Counts::of(SUMMARY_HEADER).plus(body).tokens() > cap {
            break;
        }
        let tokens = frame_counts(lines.len() - shown).plus(body).tokens();
        if tokens <= cap {
            best = Some(SummaryPlan { shown, tokens });
        }
    }
    best
}

/// The summary text: header, note on omitted lines, then the newest `shown`
/// lines oldest first.
fn render_summary(lines: &[SummaryLine], shown: usize) -> String {
    let omitted = lines.len() - shown;
    let mut out = String::from(SUMMARY_HEADER);
    if omitted > 0 {
        out.push('\n');
        out.push_str(&omitted_note(omitted));
    }
    for line in &lines[omitted..] {
        out.push('\n');
        out.push_str(&line.text);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn user(turn: &str, text: &str) -> HistoryEntry {
        HistoryEntry::User {
            turn_id: turn.into(),
            text: text.into(),
            seat_id: None,
        }
    }

    fn call(turn: &str, id: &str, tool: &str) -> HistoryEntry {
        HistoryEntry::ToolCall {
            turn_id: turn.into(),
            call_id: id.into(),
            tool: tool.into(),
            arguments: r#"{"character_id":"c1","to":"hall"}"#.into(),
        }
    }

    fn result(turn: &str, id: &str, tool: &str, content: &str) -> HistoryEntry {
        HistoryEntry::ToolResult {
            turn_id: turn.into(),
            call_id: id.into(),
            tool: tool.into(),
            content: content.into(),
        }
    }

    fn gm(turn: &str, text: &str) -> HistoryEntry {
        HistoryEntry::Assistant {
            turn_id: turn.into(),
            text: text.into(),
        }
    }

    /// A closed turn: the player's text, one `move` call and its result,
    /// then narration.
    fn turn(n: usize, player: &str, narration: &str) -> Vec<HistoryEntry> {
        let t = format!("t{n}");
        let id = format!("call_{n}");
        vec![
            user(&t, player),
            call(&t, &id, "move"),
            result(&t, &id, "move", r#"{"area_id":"hall","ok":true}"#),
            gm(&t, narration),
        ]
    }

    fn tokens(entries: &[HistoryEntry]) -> usize {
        entries.iter().map(entry_tokens).sum()
    }

    fn total(p: &Pruned) -> usize {
        tokens(&p.entries) + p.summary.as_deref().map_or(0, estimate_tokens)
    }

    fn history(turns: usize) -> Vec<HistoryEntry> {
        (0..turns)
            .flat_map(|n| {
                turn(
                    n,
                    &format!("player message number {n}, going somewhere"),
                    &format!("The game master narrates turn {n} at some length."),
                )
            })
            .collect()
    }

    /// Deterministic numbers for generated histories.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn text(&mut self) -> String {
            let words = [
                "go",
                "north",
                "the",
                "hall",
                "掷骰子",
                "你好",
                "dragon",
                "é",
            ];
            (0..1 + self.below(12))
                .map(|_| words[self.below(words.len())])
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    /// A history of closed turns with 0-3 tool calls each (sometimes two
    /// calls before their results), an open last turn that may have a call
    /// still waiting for its result, and maybe a cut-off start.
    fn generate(g: &mut Gen) -> Vec<HistoryEntry> {
        let turns = 1 + g.below(8);
        let mut out = Vec::new();
        let mut id = 0;
        for n in 0..turns {
            let t = format!("t{n}");
            let is_last = n + 1 == turns;
            out.push(user(&t, &g.text()));
            for _ in 0..g.below(4) {
                id += 1;
                let tool = ["move", "roll_dice", "explore"][g.below(3)];
                let content = match g.below(4) {
                    0 => r#"{"status":"error","reason":"invalid_arguments"}"#.to_string(),
                    1 => r#"{"status":"rejected","reason":"not_allowed"}"#.to_string(),
                    _ => format!(r#"{{"total":{},"note":"{}"}}"#, g.below(20), g.text()),
                };
                if g.below(3) == 0 {
                    // Two calls, then both results.
                    let (a, b) = (format!("c{id}a"), format!("c{id}b"));
                    out.push(call(&t, &a, tool));
                    out.push(call(&t, &b, "roll_dice"));
                    out.push(result(&t, &a, tool, &content));
                    out.push(result(&t, &b, "roll_dice", r#"{"total":7}"#));
                } else {
                    let c = format!("c{id}");
                    out.push(call(&t, &c, tool));
                    out.push(result(&t, &c, tool, &content));
                }
            }
            if is_last {
                match g.below(3) {
                    0 => out.push(gm(&t, &g.text())),
                    1 => out.push(call(&t, "pending", "move")),
                    _ => {}
                }
            } else {
                out.push(gm(&t, &g.text()));
            }
        }
        let cut = g.below(out.len().min(6));
        out.split_off(cut)
    }

    #[test]
    fn estimate_counts_ascii_by_four_and_other_chars_by_one() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("你好世界"), 4);
        assert_eq!(estimate_tokens("去 hall"), 1 + 2);
        assert_eq!(estimate_tokens("é"), 1);
        assert_eq!(estimate_tokens("🐉"), 1);
        assert_eq!(entry_tokens(&user("t1", "")), MESSAGE_OVERHEAD);
        assert_eq!(entry_tokens(&user("t1", "你好")), MESSAGE_OVERHEAD + 2);
    }

    #[test]
    fn zero_budget_keeps_everything() {
        let h = history(50);
        let p = prune(h.clone(), 0);
        assert_eq!(p.entries, h);
        assert_eq!(p.summary, None);
        assert_eq!(p.dropped_turns, 0);
        assert_eq!(prune(Vec::<HistoryEntry>::new(), 10).entries, Vec::new());
    }

    #[test]
    fn under_budget_is_unchanged() {
        let h = history(5);
        for budget in [tokens(&h), tokens(&h) + 1, 100_000] {
            let p = prune(h.clone(), budget);
            assert_eq!(p.entries, h);
            assert_eq!(p.summary, None);
            assert_eq!(p.dropped_turns, 0);
        }
    }

    #[test]
    fn over_budget_drops_oldest_whole_turns() {
        let h = history(10);
        let per_turn = tokens(&h[..4]);
        let budget = per_turn * 6;
        let p = prune(h.clone(), budget);
        assert!(p.dropped_turns > 0);
        assert!(p.dropped_turns < 10);
        assert_eq!(p.entries.len(), (10 - p.dropped_turns) * 4);
        assert_eq!(p.entries[..], h[h.len() - p.entries.len()..]);
        assert!(matches!(p.entries[0], HistoryEntry::User { .. }));
        assert!(total(&p) <= budget, "{} > {budget}", total(&p));
        let summary = p.summary.expect("dropped turns are summarized");
        assert!(estimate_tokens(&summary) <= budget / 4);
        let newest = format!("player message number {},", p.dropped_turns - 1);
        assert!(summary.contains(&newest), "{summary}");
    }

    #[test]
    fn last_turn_is_kept_whole_even_over_budget() {
        let mut h = history(3);
        let big = "word ".repeat(400);
        h.push(user("t9", &big));
        h.push(call("t9", "c9", "explore"));
        h.push(result(
            "t9",
            "c9",
            "explore",
            &format!(r#"{{"text":"{big}"}}"#),
        ));
        let last_turn = h[h.len() - 3..].to_vec();
        assert!(tokens(&last_turn) > 50);
        let p = prune(h, 50);
        assert_eq!(p.entries, last_turn);
        assert_eq!(p.dropped_turns, 3);
        // No room left for a summary.
        assert_eq!(p.summary, None);

        // The open last turn may end with a call still waiting for its result.
        let mut h = history(3);
        h.push(user("t9", "explore"));
        h.push(call("t9", "c9", "explore"));
        let p = prune(h.clone(), 1);
        assert_eq!(p.entries, h[h.len() - 2..]);
        let p = prune(h.clone(), 100_000);
        assert_eq!(p.entries, h);
    }

    #[test]
    fn a_history_starting_mid_turn_drops_that_piece_first() {
        let mut h = vec![
            result("t0", "c0", "move", r#"{"area_id":"hall"}"#),
            gm("t0", "You arrive."),
        ];
        h.extend(history(4));
        // A result without its call is never sent, even under budget.
        let p = prune(h.clone(), 100_000);
        assert_eq!(p.entries, h[2..]);
        assert_eq!(p.dropped_turns, 1);
        let summary = p.summary.unwrap();
        assert!(
            summary.contains("(turn already under way) -> move ok"),
            "{summary}"
        );
        assert!(summary.contains("You arrive."), "{summary}");

        // A piece without a result is just the oldest group: kept while it
        // fits, dropped first when it does not (here with the next turn, to
        // make room for the summary).
        let mut h = vec![gm("t0", "You arrive.")];
        h.extend(history(30));
        let p = prune(h.clone(), tokens(&h));
        assert_eq!(p.entries, h);
        let budget = tokens(&h) - 1;
        let p = prune(h.clone(), budget);
        assert_eq!(p.dropped_turns, 2);
        assert_eq!(p.entries, h[5..]);
        assert!(total(&p) <= budget);
        assert_eq!(
            p.summary.unwrap().lines().nth(1),
            Some("- (turn already under way) -> gm: \"You arrive.\"")
        );

        // A piece whose call lost its result in an earlier cut, mid-turn.
        let h = vec![
            call("t0", "c0", "move"),
            gm("t0", "Hmm."),
            user("t1", "look"),
            gm("t1", "A hall."),
        ];
        let p = prune(h.clone(), 100_000);
        assert_eq!(p.entries, h[2..]);
    }

    #[test]
    fn a_history_of_one_piece_is_kept_whole() {
        let h = vec![
            result("t0", "c0", "move", "{}"),
            call("t0", "c1", "roll_dice"),
        ];
        let p = prune(h.clone(), 1);
        assert_eq!(p.entries, h);
        assert_eq!(p.dropped_turns, 0);
        assert_eq!(p.summary, None);
    }

    #[test]
    fn generated_histories_keep_pairs_and_suffixes() {
        let mut g = Gen(7);
        // Cases seen: turns dropped, a summary, the last turn over budget, a
        // cut-off start.
        let mut seen = [0usize; 4];
        for case in 0..400 {
            let h = generate(&mut g);
            let users = h
                .iter()
                .filter(|e| matches!(e, HistoryEntry::User { .. }))
                .count();
            let piece = usize::from(!matches!(h[0], HistoryEntry::User { .. }));
            let groups = users + piece;
            let last_start = h
                .iter()
                .rposition(|e| matches!(e, HistoryEntry::User { .. }))
                .unwrap_or(0);
            let last_cost = tokens(&h[last_start..]);
            for budget in [1, 3, 10, 25, 50, 80, 120, 200, 400, 800, 5000] {
                let p = prune(h.clone(), budget);
                seen[0] += usize::from(p.dropped_turns > 0);
                seen[1] += usize::from(p.summary.is_some());
                seen[2] += usize::from(last_cost > budget);
                seen[3] += piece;
                let ctx = || format!("case {case}, budget {budget}: {p:#?}");
                let kept = &p.entries;
                assert!(!kept.is_empty(), "{}", ctx());
                assert_eq!(kept[..], h[h.len() - kept.len()..], "{}", ctx());
                let first_kept = h.len() - kept.len();
                assert!(first_kept <= last_start, "last turn split: {}", ctx());
                if users > 0 {
                    for (j, e) in kept.iter().enumerate() {
                        if let HistoryEntry::ToolResult { call_id, .. } = e {
                            assert!(
                                kept[..j].iter().any(|c| matches!(
                                    c, HistoryEntry::ToolCall { call_id: id, .. } if id == call_id
                                )),
                                "orphan result: {}",
                                ctx()
                            );
                        }
                        if let HistoryEntry::ToolCall { call_id, .. } = e
                            && first_kept + j < last_start
                        {
                            assert!(
                                kept[j + 1..].iter().any(|r| matches!(
                                    r, HistoryEntry::ToolResult { call_id: id, .. } if id == call_id
                                )),
                                "unanswered call: {}",
                                ctx()
                            );
                        }
                    }
                }
                let dropped = &h[..first_kept];
                let dropped_groups = dropped
                    .iter()
                    .filter(|e| matches!(e, HistoryEntry::User { .. }))
                    .count()
                    + usize::from(piece == 1 && !dropped.is_empty());
                assert_eq!(p.dropped_turns, dropped_groups, "{}", ctx());
                assert!(p.dropped_turns < groups, "{}", ctx());
                if p.dropped_turns == 0 {
                    assert_eq!(p.summary, None, "{}", ctx());
                }
                if let Some(s) = &p.summary {
                    assert!(estimate_tokens(s) <= budget / 4, "{}", ctx());
                }
                if last_cost <= budget {
                    assert!(total(&p) <= budget, "{}", ctx());
                }
                if tokens(&h) <= budget && piece == 0 {
                    assert_eq!(kept[..], h[..], "{}", ctx());
                }
            }
        }
        assert!(seen.iter().all(|&n| n > 100), "{seen:?}");
    }

    #[test]
    fn chinese_text_is_counted_and_clipped_safely() {
        let long = "你好，冒险者。".repeat(40);
        assert_eq!(estimate_tokens(&long), long.chars().count());
        let clipped = clip(&long, SUMMARY_TEXT_CHARS);
        assert!(clipped.ends_with("..."));
        assert_eq!(clipped.chars().count(), SUMMARY_TEXT_CHARS + 3);
        for n in 0..12 {
            assert!(clip("é🐉你 好", n).chars().count() <= n + 3);
        }

        let mut h = Vec::new();
        for n in 0..6 {
            h.extend(turn(n, &format!("{n}去大厅{long}"), &long));
        }
        let p = prune(h.clone(), tokens(&h[h.len() - 4..]) + 2000);
        let summary = p.summary.unwrap();
        assert!(summary.contains("- player: \"0去大厅你好"), "{summary}");
        assert!(
            summary.contains("...\" -> move ok -> gm: \"你好"),
            "{summary}"
        );
        assert!(
            summary.lines().all(|l| l.chars().count() < 250),
            "{summary}"
        );
    }

    #[test]
    fn summary_names_player_text_and_tools() {
        let mut h = vec![
            user("t1", "go to the hall"),
            call("t1", "c1", "move"),
            result("t1", "c1", "move", r#"{"area_id":"hall"}"#),
            call("t1", "c2", "roll_dice"),
            result(
                "t1",
                "c2",
                "roll_dice",
                r#"{"status":"rejected","reason":"tool_not_allowed"}"#,
            ),
            call("t1", "c3", "explore"),
            result(
                "t1",
                "c3",
                "explore",
                r#"{"status":"error","reason":"timeout"}"#,
            ),
            call("t1", "c4", "publish"),
            result("t1", "c4", "publish", r#"{"status":"published"}"#),
            gm("t1", "You step into the hall.\nIt is   cold."),
        ];
        h.extend(history(4));
        let budget = tokens(&h[10..]) + 60;
        assert!(tokens(&h[..10]) > 60);
        let p = prune(h, budget);
        assert_eq!(p.dropped_turns, 1);
        assert_eq!(
            p.summary.as_deref(),
            Some(
                "Earlier turns, oldest first:\n\
                 - player: \"go to the hall\" -> move ok, roll_dice rejected, explore error, \
                 publish ok -> gm: \"You step into the hall. It is cold.\""
            )
        );
    }

    #[test]
    fn summary_is_capped_dropping_its_oldest_lines() {
        let h = history(60);
        let budget = tokens(&h[h.len() - 8..]) + 120;
        let p = prune(h, budget);
        assert!(p.dropped_turns >= 50);
        assert!(total(&p) <= budget);
        let summary = p.summary.unwrap();
        assert!(estimate_tokens(&summary) <= budget / 4, "{summary}");
        // The newest dropped turn is there, the oldest ones are counted.
        let newest = format!("player message number {}", p.dropped_turns - 1);
        assert!(summary.contains(&newest), "{summary}");
        assert!(!summary.contains("player message number 0,"), "{summary}");
        let lines: Vec<&str> = summary.lines().collect();
        let shown = lines.len() - 2;
        assert!(shown >= 1, "{summary}");
        assert_eq!(
            lines[1],
            format!("- ({} earlier turns omitted)", p.dropped_turns - shown)
        );

        // With a tiny budget even the note may not fit.
        let p = prune(history(20), 8);
        assert!(p.dropped_turns > 0);
        assert_eq!(p.summary, None);
    }
}
