//! The frames that open and close a turn in the journal: `turn_started`
//! with the player's message, and `turn_completed` with what the turn
//! changed (its state patch) or `turn_failed` with why, each with the line
//! the model's history keeps of it.
//!
//! They are apart from the session's core (`core.rs`) because what they
//! say is a pure function of the turn's bookkeeping ([`Turn`]) and of the state after
//! its effects: the core decides when a turn starts and ends, cancels its
//! timers and counts it, and journals the [`Entry`] answered here. That
//! keeps the wire shape of a turn's ends, which clients and the one-turn
//! HTTP answer read, tested here without actix.

use super::sequencer::Entry;
use super::turn::Turn;
use crate::error::ErrorCode;
use crate::game::state::CharacterId;
use crate::game::timers::{Timer, world_message};
use crate::game::{Effect, GameState, HistoryEntry};
use crate::ids::{RequestId, SeatId, TurnId};
use crate::protocol::{
    Position, RoundActionView, StatePatch, StoryEvent, Trigger, TurnCompleted, TurnFailed,
    TurnLimit, WorldTrigger, ZonePosition,
};

/// What a restarted session says of a turn the journal shows started but
/// never ended.
pub(super) const INTERRUPTED: &str =
    "the server stopped during this turn; its completed tool calls are kept";

/// The `turn_started` frame of turn `turn_no`, taken from a player's
/// `text`: it begins the turn in the state and puts the text in the
/// model's history.
pub(super) fn started(
    state: &GameState,
    turn_no: u64,
    turn_id: &TurnId,
    request_id: Option<RequestId>,
    text: String,
    seat_id: &SeatId,
) -> Entry {
    Entry {
        event: StoryEvent::TurnStarted {
            turn_id: turn_id.clone(),
            request_id,
            actor_id: character_of(state, seat_id),
            text: text.clone(),
            seat_id: Some(seat_id.clone()),
            round: None,
            actions: None,
            world: None,
        },
        effect: Some(Effect::BeginTurn { turn: turn_no }),
        history: Some(HistoryEntry::User {
            turn_id: turn_id.clone(),
            text,
            seat_id: Some(seat_id.clone()),
        }),
        history_from_frame: true,
        action: None,
    }
}

/// The `turn_started` frame of turn `turn_no`, which resolves round
/// `round` with every seat's action (`text`: the one message the model
/// reads of them). Its effect begins the turn and the next round in one
/// journalled frame, so the round is resolved exactly once.
pub(super) fn round_started(
    state: &GameState,
    turn_no: u64,
    turn_id: &TurnId,
    round: u64,
    actions: Vec<RoundActionView>,
    text: String,
    first_actor: Option<&CharacterId>,
) -> Entry {
    Entry {
        event: StoryEvent::TurnStarted {
            turn_id: turn_id.clone(),
            request_id: None,
            actor_id: first_actor.map_or_else(|| state.active_actor_id.clone(), Clone::clone),
            text: text.clone(),
            // No one seat speaks: `actions` says who did what.
            seat_id: None,
            round: Some(round),
            actions: Some(actions),
            world: None,
        },
        effect: Some(Effect::BeginRound {
            turn: turn_no,
            round,
        }),
        history: Some(HistoryEntry::User {
            turn_id: turn_id.clone(),
            text,
            seat_id: None,
        }),
        history_from_frame: true,
        action: None,
    }
}

/// The `turn_started` frame of the world turn `turn_no` that fires
/// `timer` at its due time, which the state leaves at `now`: its effect
/// begins the turn and marks the timer fired (or due again) in one
/// journalled frame, so a due time fires exactly once. The model is told
/// the event and its note ([`world_message`]); no seat speaks.
pub(super) fn timer_started(
    state: &GameState,
    turn_no: u64,
    turn_id: &TurnId,
    timer: &Timer,
    now: i64,
) -> Entry {
    let text = world_message(&timer.event, &timer.note);
    Entry {
        event: StoryEvent::TurnStarted {
            turn_id: turn_id.clone(),
            request_id: None,
            actor_id: state.active_actor_id.clone(),
            text: text.clone(),
            seat_id: None,
            round: None,
            actions: None,
            world: Some(WorldTrigger {
                trigger: Trigger::Timer,
                timer_id: timer.timer_id.clone(),
                event: timer.event.clone(),
            }),
        },
        effect: Some(Effect::FireTimer {
            turn: turn_no,
            timer_id: timer.timer_id.clone(),
            due_at: timer.due_at,
            next_due_at: timer.next_due(now),
        }),
        history: Some(HistoryEntry::User {
            turn_id: turn_id.clone(),
            text,
            seat_id: None,
        }),
        history_from_frame: true,
        action: None,
    }
}

/// The character `seat_id` plays: the speaker's, whom the turn acts for.
/// A seat the party does not hold (none should speak) acts as the active
/// character, as every turn did before parties.
pub(super) fn character_of(state: &GameState, seat_id: &SeatId) -> CharacterId {
    state
        .party
        .seat(seat_id.as_str())
        .map_or_else(|| state.active_actor_id.clone(), |s| s.character_id.clone())
}

/// The `turn_completed` frame of a turn that ends with `reply`: its calls'
/// events, tokens and what it changed, read from `state` (the state after
/// its effects), with `speaker`'s position; the reply is the model's
/// history line.
pub(super) fn completed(
    turn: Turn,
    state: &GameState,
    speaker: Option<&CharacterId>,
    reply: String,
    dialog_type: String,
    limit: Option<TurnLimit>,
) -> Entry {
    let state_patch = state_patch(&turn, state, speaker);
    let turn_id = turn.turn_id().clone();
    let (iterations, usage) = (turn.iteration(), turn.usage());
    let model = turn.model().map(|m| m.to_string());
    Entry {
        event: StoryEvent::TurnCompleted(TurnCompleted {
            turn_id: turn_id.clone(),
            reply: reply.clone(),
            dialog_type,
            iterations,
            tool_events: turn.into_tool_events(),
            state_patch,
            usage,
            limit,
            model,
        }),
        effect: None,
        history: Some(HistoryEntry::Assistant {
            turn_id: turn_id.clone(),
            text: reply,
        }),
        history_from_frame: true,
        action: None,
    }
}

/// The `turn_failed` frame of `turn_id`; the model's history notes that
/// the turn ended early, and why, so its next turn knows.
pub(super) fn failed(
    turn_id: &TurnId,
    code: ErrorCode,
    message: String,
    limit: Option<TurnLimit>,
) -> Entry {
    Entry {
        history: Some(HistoryEntry::Assistant {
            turn_id: turn_id.clone(),
            text: format!("[the turn ended early: {message}]"),
        }),
        ..Entry::frame(StoryEvent::TurnFailed(TurnFailed {
            turn_id: turn_id.clone(),
            error_code: code,
            message,
            limit,
        }))
    }
}

/// What a turn changed: the areas, characters and zones its calls touched,
/// whole, as they are in `state`, and where the speaker stands (the
/// character the turn acted for first; the active character when none
/// is known), on the map and (once the world has zones) in the zone world.
pub(super) fn state_patch(
    turn: &Turn,
    state: &GameState,
    speaker: Option<&CharacterId>,
) -> StatePatch {
    let speaker = speaker
        .and_then(|id| state.character(id.as_str()))
        .or_else(|| state.active_actor());
    StatePatch {
        areas: turn
            .touched_areas()
            .iter()
            .filter_map(|id| state.area(id).cloned())
            .collect(),
        characters: turn
            .touched_characters()
            .iter()
            .filter_map(|id| state.character(id).cloned())
            .collect(),
        position: speaker.map(|a| Position {
            actor_id: a.character_id.clone(),
            area_id: a.area_id.clone(),
        }),
        zones: turn
            .touched_zones()
            .iter()
            .filter_map(|id| state.zone(id).cloned())
            .collect(),
        zone_position: (!state.zones.is_empty()).then(|| {
            let player = &state.player;
            Box::new(ZonePosition {
                x: player.position.x,
                y: player.position.y,
                z: player.position.z,
                zone_id: player.current_zone_id.clone(),
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::turn::test_support::{call, event};
    use super::*;
    use crate::game::state::{AreaId, CharacterId};
    use crate::llm::{ModelReply, Usage};
    use crate::tools::test_support::demo;

    /// Turn 4, whose one model answer moved the player to `area_002`
    /// (applied to the state answered) and rolled a die.
    fn moved() -> (Turn, GameState) {
        let mut turn = Turn::new("turn_4".into(), 4, "tr_4".into(), 4);
        turn.resume();
        turn.model_called();
        turn.on_model_done(ModelReply {
            tool_calls: vec![call("c1", "move", "{}"), call("c2", "roll_dice", "{}")],
            usage: Usage {
                prompt_tokens: 30,
                completion_tokens: 4,
            },
            ..ModelReply::default()
        });
        let effect = Effect::Move {
            character_id: CharacterId::from("pc_001"),
            to_area_id: AreaId::from("area_002"),
        };
        let mut state = demo();
        state.apply(&effect);
        turn.call_ran(event("c1", "move"), Some(&effect));
        turn.call_ran(event("c2", "roll_dice"), None);
        (turn, state)
    }

    #[test]
    fn a_turn_starts_with_the_players_text_as_the_active_character() {
        let entry = started(
            &demo(),
            4,
            &"turn_4".into(),
            Some("r-1".into()),
            "look".into(),
            &crate::game::party::host_seat(),
        );
        assert!(matches!(
            &entry.event,
            StoryEvent::TurnStarted { turn_id, request_id: Some(r), actor_id, text, .. }
                if turn_id.as_str() == "turn_4" && r == "r-1" && actor_id == "pc_001" && text == "look"
        ));
        assert_eq!(entry.effect, Some(Effect::BeginTurn { turn: 4 }));
        assert!(matches!(
            &entry.history,
            Some(HistoryEntry::User { turn_id, text, .. }) if turn_id == "turn_4" && text == "look"
        ));
    }

    #[test]
    fn a_completed_turn_says_what_it_did_and_changed() {
        let (turn, state) = moved();
        let entry = completed(
            turn,
            &state,
            None,
            "You step inside.".into(),
            "narration".into(),
            Some(TurnLimit::RepeatedCall),
        );
        let StoryEvent::TurnCompleted(done) = &entry.event else {
            panic!("not turn_completed: {:?}", entry.event);
        };
        assert_eq!(done.turn_id.as_str(), "turn_4");
        assert_eq!(
            (done.reply.as_str(), done.dialog_type.as_str()),
            ("You step inside.", "narration")
        );
        assert_eq!(done.iterations, 1);
        let tools: Vec<&str> = done.tool_events.iter().map(|e| e.tool.as_str()).collect();
        assert_eq!(tools, ["move", "roll_dice"], "in the order they ran");
        assert_eq!(
            (done.usage.prompt_tokens, done.usage.completion_tokens),
            (30, 4)
        );
        assert_eq!(done.limit, Some(TurnLimit::RepeatedCall));
        let patch = &done.state_patch;
        let areas: Vec<&str> = patch.areas.iter().map(|a| a.area_id.as_str()).collect();
        assert_eq!(areas, ["area_002"]);
        assert_eq!(patch.characters.len(), 1);
        assert_eq!(
            patch.characters[0].area_id.as_str(),
            "area_002",
            "as the state has it"
        );
        let position = patch
            .position
            .as_ref()
            .expect("the player stands somewhere");
        assert_eq!(
            (position.actor_id.as_str(), position.area_id.as_str()),
            ("pc_001", "area_002")
        );
        assert!(matches!(
            &entry.history,
            Some(HistoryEntry::Assistant { turn_id, text }) if turn_id == "turn_4" && text == "You step inside."
        ));
        assert_eq!((entry.effect, entry.action), (None, None));
    }

    #[test]
    fn the_state_patch_leaves_out_what_the_state_does_not_hold() {
        // A call touched a character and an area the state does not hold
        // (its effect was never applied), and nobody is active.
        let mut turn = Turn::new("turn_5".into(), 5, "tr_5".into(), 4);
        let ghost = Effect::Move {
            character_id: CharacterId::from("ghost"),
            to_area_id: AreaId::from("area_404"),
        };
        turn.call_ran(event("c1", "move"), Some(&ghost));
        let mut state = demo();
        state.active_actor_id = CharacterId::from("nobody");
        assert_eq!(state_patch(&turn, &state, None), StatePatch::default());
    }

    #[test]
    fn the_state_patch_carries_new_zones_and_the_players_zone_position() {
        use crate::game::zones::zone_at;

        // A turn that made two zones and travelled to one of them.
        let mut turn = Turn::new("turn_6".into(), 6, "tr_6".into(), 4);
        let mut state = demo();
        let (far, near) = (zone_at(2, 0, 0), zone_at(1, 1, 0));
        let made = Effect::AddZones {
            zones: vec![far.clone(), near.clone()],
        };
        state.apply(&made);
        turn.call_ran(event("c1", "generate_zone"), Some(&made));
        let went = Effect::MoveToZone {
            position: near.pos(),
            entry: crate::game::zones::MovementLogEntry {
                movement_log_id: "mv_0000000000000001".into(),
                from_zone_id: None,
                to_zone_id: near.zone_id.clone(),
                distance_miles: 1.41,
                duration_min: 29,
                turn: 6,
            },
        };
        state.apply(&went);
        turn.call_ran(event("c2", "move_to_zone"), Some(&went));
        let patch = state_patch(&turn, &state, None);
        assert_eq!(patch.zones, vec![near.clone(), far], "whole, by id");
        assert_eq!(
            serde_json::to_value(&patch).unwrap()["zone_position"],
            serde_json::json!({"x": 1, "y": 1, "z": 0, "zone_id": "zone_1_1_0"})
        );

        // A later turn that touched no zone: none in the patch, but the
        // player still stands somewhere in the world.
        let quiet = Turn::new("turn_7".into(), 7, "tr_7".into(), 4);
        let patch = state_patch(&quiet, &state, None);
        assert!(patch.zones.is_empty());
        assert_eq!(
            patch.zone_position.and_then(|p| p.zone_id).as_deref(),
            Some("zone_1_1_0")
        );
        // A world with zones the player never travelled to: a cell, no zone.
        let mut fresh = demo();
        fresh.apply(&made);
        let at = *state_patch(&quiet, &fresh, None).zone_position.unwrap();
        assert_eq!((at.x, at.y, at.z, at.zone_id), (0, 0, 0, None));
    }

    #[test]
    fn a_stored_patch_from_before_zones_reads_with_none() {
        let old = serde_json::json!({
            "areas": [], "characters": [],
            "position": {"actor_id": "pc_001", "area_id": "area_001"}
        });
        let patch: StatePatch = serde_json::from_value(old).unwrap();
        assert!(patch.zones.is_empty() && patch.zone_position.is_none());
        // A campaign without zones sends zone_position null.
        let sent = serde_json::to_value(state_patch(
            &Turn::new("turn_1".into(), 1, "tr_1".into(), 4),
            &demo(),
            None,
        ))
        .unwrap();
        assert_eq!(sent["zone_position"], serde_json::Value::Null);
        assert_eq!(sent["zones"], serde_json::json!([]));
    }

    #[test]
    fn the_patch_places_the_speaker_not_the_host() {
        let (turn, mut state) = moved();
        let brin = crate::tools::test_support::seat(&mut state, 2, "Brin", "area_003");
        let patch = state_patch(&turn, &state, Some(&brin));
        let position = patch.position.expect("a position");
        assert_eq!(
            (position.actor_id.as_str(), position.area_id.as_str()),
            ("pc_002", "area_003"),
            "Brin spoke: Brin's place, not the host's"
        );
        let alone = state_patch(&turn, &state, None)
            .position
            .expect("a position");
        assert_eq!(
            alone.actor_id.as_str(),
            "pc_001",
            "no speaker: the active character"
        );
    }

    #[test]
    fn a_failed_turn_says_why_and_the_history_notes_it_ended_early() {
        let cases = [
            (
                ErrorCode::AiTimeout,
                "the turn took longer than 90 s",
                Some(TurnLimit::Deadline),
            ),
            (ErrorCode::InternalError, INTERRUPTED, None),
        ];
        for (code, message, limit) in cases {
            let entry = failed(&"turn_6".into(), code, message.into(), limit);
            let StoryEvent::TurnFailed(f) = &entry.event else {
                panic!("not turn_failed: {:?}", entry.event);
            };
            assert_eq!(
                (
                    f.turn_id.as_str(),
                    f.error_code,
                    f.message.as_str(),
                    f.limit
                ),
                ("turn_6", code, message, limit)
            );
            let note = format!("[the turn ended early: {message}]");
            assert!(matches!(
                &entry.history,
                Some(HistoryEntry::Assistant { turn_id, text }) if turn_id == "turn_6" && *text == note
            ));
            assert_eq!((entry.effect, entry.action), (None, None));
        }
    }
}
