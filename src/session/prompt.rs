//! What a session asks its model: the request for a turn's next step (or
//! its wrap-up), and the request for the text a tool needs written.
//!
//! It is apart from the session's core (`core.rs`) because a request is a pure
//! function of what the session lends ([`SessionView`]) and of the history
//! journalled but not yet durable: the core decides *when* to ask and
//! streams the answer, this module says *what* is asked, tested here
//! without actix. The history's cut to its token budget, the summary of what
//! was cut and the wrap-up's closing note are [`ModelRequest::build`]'s, the
//! one way the stateless `/api/chat` builds its requests too; this adds what
//! only a session has: the campaign's system prompt, its tools for the game
//! master, and the context of where the game stands. [`Prompter`] keeps
//! what a session's requests share from one to the next (its tools, its
//! context) and builds a running turn's request.

use std::sync::Arc;

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::turn::Turn;
use super::types::SessionView;
use crate::game::party::Party;
use crate::game::state::CharacterId;
use crate::game::{Area, GameState, HistoryEntry};
use crate::ids::TurnId;
use crate::llm::{ModelRequest, RequestKind, system_prompt};

/// The request for a turn's next model call, with the session's `context`
/// for that turn ([`ContextCache`]). The model sees the
/// history as it will be once `in_flight` (what is journalled but not yet
/// durable) is: it need not wait for the player's message to be on disk,
/// since nothing it says reaches a client before that.
///
/// A model that reads only the turn at hand (`whole_conversation` false:
/// the offline game master, [`crate::llm::Provider::reads_conversation`])
/// is sent just that: the entries from the turn's player message on, no
/// system prompt, and no history to cut or summarize.
pub(super) fn model_request(
    view: &SessionView<'_>,
    tools: Arc<[Value]>,
    in_flight: impl IntoIterator<Item = Arc<HistoryEntry>>,
    history_tokens: usize,
    context: Arc<Value>,
    kind: RequestKind,
    whole_conversation: bool,
) -> ModelRequest {
    let is_user = |e: &Arc<HistoryEntry>| matches!(**e, HistoryEntry::User { .. });
    if !whole_conversation {
        // Only what follows the last player message is cloned, wherever
        // it is: in flight, or in the durable history.
        let mut in_flight: Vec<Arc<HistoryEntry>> = in_flight.into_iter().collect();
        let messages = match in_flight.iter().rposition(is_user) {
            Some(start) => in_flight.split_off(start),
            None => {
                let history = &view.state.history;
                let start = history.iter().rposition(is_user).unwrap_or(0);
                history
                    .iter()
                    .skip(start)
                    .cloned()
                    .chain(in_flight)
                    .collect()
            }
        };
        return ModelRequest {
            system: String::new(),
            messages,
            tools,
            context,
            kind,
            results: Vec::new(),
            fallback: false,
        };
    }
    let mut history: Vec<Arc<HistoryEntry>> = view
        .state
        .history
        .iter()
        .cloned()
        .chain(in_flight)
        .collect();
    let party = &view.state.party;
    if party.someone_joined() {
        name_speakers(party, &mut history);
    }
    ModelRequest::build(
        system_prompt(view.state),
        history,
        history_tokens,
        tools,
        context,
        kind,
    )
}

/// Earlier turns' player lines as a model reading a party's conversation
/// sees them: `Name: text`, the name of the seat that said it (a round's
/// message names everyone already, and has no seat). The turn at hand is
/// left as said: the context names its speaker. The journal keeps the
/// words as said; only the request names.
fn name_speakers(party: &Party, history: &mut [Arc<HistoryEntry>]) {
    let current = history.iter().rev().find_map(|e| match &**e {
        HistoryEntry::User { turn_id, .. } => Some(turn_id.clone()),
        _ => None,
    });
    for entry in history {
        let HistoryEntry::User {
            turn_id,
            text,
            seat_id: Some(seat_id),
        } = &**entry
        else {
            continue;
        };
        let Some(seat) = party.seat(seat_id.as_str()) else {
            continue;
        };
        if Some(turn_id) == current.as_ref() {
            continue;
        }
        *entry = Arc::new(HistoryEntry::User {
            turn_id: turn_id.clone(),
            text: format!("{}: {text}", seat.name),
            seat_id: Some(seat_id.clone()),
        });
    }
}

/// What a session's model requests share from one to the next: the game
/// master's tools in the model's shape, made on the first request (the
/// campaign's allowlist never changes during a session), and the context
/// while the state is unchanged.
#[derive(Default)]
pub(super) struct Prompter {
    tools: Option<Arc<[Value]>>,
    context: ContextCache,
}

impl Prompter {
    /// The state changed beyond the turn number: the next request reads
    /// the context again.
    pub(super) fn state_changed(&mut self) {
        self.context.state_changed();
    }

    /// The request for `turn`'s next model call ([`model_request`]), with
    /// `correction` (a rejected answer and the message correcting it) after
    /// the history, not kept in it, and the turn's calls' results as the
    /// values they are, beside the history's text of them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn turn_request(
        &mut self,
        view: &SessionView<'_>,
        turn: &Turn,
        acting: &[CharacterId],
        in_flight: impl IntoIterator<Item = Arc<HistoryEntry>>,
        correction: Option<(String, String)>,
        history_tokens: usize,
        kind: RequestKind,
        whole_conversation: bool,
    ) -> ModelRequest {
        let turn_id = turn.turn_id().clone();
        let correction = correction.into_iter().flat_map(|(answer, message)| {
            [
                Arc::new(HistoryEntry::Assistant {
                    turn_id: turn_id.clone(),
                    text: answer,
                }),
                Arc::new(HistoryEntry::User {
                    turn_id: turn_id.clone(),
                    text: message,
                    seat_id: None,
                }),
            ]
        });
        let tools = self
            .tools
            .get_or_insert_with(|| view.registry.openai_tools(&view.game_master()))
            .clone();
        let context = self.context.get(view, turn.turn_no(), acting);
        let in_flight = in_flight.into_iter().chain(correction);
        let mut request = model_request(
            view,
            tools,
            in_flight,
            history_tokens,
            context,
            kind,
            whole_conversation,
        );
        request.results = turn.results();
        request
    }
}

/// A session's context ([`context_json`]) kept between model requests
/// while the state it was read from is unchanged: a turn asks the model at
/// least twice, and turns whose tools change nothing (a roll, a look at
/// the map) follow each other with the same state. Only the turn number
/// is written again, in place when no request still holds the last one.
/// The session clears it whenever an effect is applied to its state, and
/// it is read again when another speaker's turn asks.
#[derive(Debug, Default)]
pub(super) struct ContextCache(Option<(Vec<CharacterId>, Arc<Value>)>);

impl ContextCache {
    /// The context for turn `turn_no` of `view`'s state, acting for
    /// `acting` (the speaker's character, or a round's actors).
    pub(super) fn get(
        &mut self,
        view: &SessionView<'_>,
        turn_no: u64,
        acting: &[CharacterId],
    ) -> Arc<Value> {
        if self.0.as_ref().is_some_and(|(for_, _)| for_ != acting) {
            self.0 = None;
        }
        let (_, context) = self.0.get_or_insert_with(|| {
            let context = context_json(view, turn_no, acting);
            (acting.to_vec(), Arc::new(context))
        });
        if context["turn"] != turn_no {
            Arc::make_mut(context)["turn"] = turn_no.into();
        }
        context.clone()
    }

    /// The state changed: the next request reads it again.
    pub(super) fn state_changed(&mut self) {
        self.0 = None;
    }
}

/// Moves away from the active character within which areas are named to
/// the model, and how many at most: a turn's context stays the same size
/// however large the map grows (a move goes one step at a time anyway).
pub(super) const NEARBY_STEPS: usize = 3;
pub(super) const NEARBY_AREAS: usize = 64;

/// What the model is told about the session during turn `turn_no`: the
/// active character, the area they stand in with where they can go, the
/// areas near it by name (nearest first, [`NEARBY_STEPS`] moves and
/// [`NEARBY_AREAS`] at most; the map's first areas when nobody stands
/// anywhere) and how many areas the map has in all.
///
/// In a party (more than one seat) the active character is the speaker's
/// (the first of `acting`), and the context adds `speaker` (name and
/// character) and `party`: every active seat's name, character and area,
/// with `acting` for those the turn acts for. A session nobody joined
/// reads as it always did.
pub(super) fn context_json(view: &SessionView<'_>, turn_no: u64, acting: &[CharacterId]) -> Value {
    let state = view.state;
    let party = &state.party;
    let actor = acting
        .first()
        .and_then(|id| state.character(id.as_str()))
        .or_else(|| state.active_actor());
    let here = actor.and_then(|a| state.area(a.area_id.as_str()));
    // Built as values directly: `json!` would serialize every nested list
    // again into a copy.
    let actor = actor.map_or(Value::Null, |a| {
        object([
            ("character_id", text(a.character_id.as_str())),
            ("name", text(&a.name)),
            ("hp", a.hp.into()),
            ("max_hp", a.max_hp.into()),
            ("state", json!(a.state)),
            ("area_id", text(a.area_id.as_str())),
        ])
    });
    let current = here.map_or(Value::Null, |h| {
        let reachable = h
            .reachable_area_ids
            .iter()
            .map(|r| state.area(r.as_str()).map_or(Value::Null, brief))
            .collect();
        object([
            ("area_id", text(h.area_id.as_str())),
            ("name", text(&h.name)),
            ("description", text(&h.description)),
            ("reachable", Value::Array(reachable)),
        ])
    });
    let mut context = object([
        ("session_id", text(view.session_id.as_str())),
        ("turn", turn_no.into()),
        ("active_actor", actor),
        ("current_area", current),
        ("areas", Value::Array(nearby(state, here))),
        ("areas_total", state.areas.len().into()),
    ]);
    if party.active().count() > 1
        && let Value::Object(fields) = &mut context
    {
        let seat = |s: &crate::game::party::Seat| {
            let area = state.character(s.character_id.as_str());
            object([
                ("seat_id", text(s.seat_id.as_str())),
                ("name", text(&s.name)),
                ("character_id", text(s.character_id.as_str())),
                (
                    "area_id",
                    area.map_or(Value::Null, |c| text(c.area_id.as_str())),
                ),
                ("acting", acting.contains(&s.character_id).into()),
            ])
        };
        let speaker = acting
            .first()
            .and_then(|c| party.seat_of_character(c.as_str()))
            .map_or(Value::Null, |s| {
                object([
                    ("name", text(&s.name)),
                    ("character_id", text(s.character_id.as_str())),
                ])
            });
        fields.insert("speaker".into(), speaker);
        fields.insert("party".into(), party.active().map(seat).collect());
    }
    context
}

/// A JSON object of these fields (distinct names). Inserted one by one:
/// collecting them would sort a copy and build the map from it, which for
/// a handful of fields costs twice as much, and a session's first context
/// builds one for each of up to [`NEARBY_AREAS`] areas.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let mut map = Map::new();
    for (name, value) in fields {
        map.insert(name.to_owned(), value);
    }
    Value::Object(map)
}

fn text(s: &str) -> Value {
    Value::String(s.to_owned())
}

/// An area as the context names it: `{area_id, name}`.
fn brief(a: &Area) -> Value {
    let mut brief = object([
        ("area_id", text(a.area_id.as_str())),
        ("name", text(&a.name)),
    ]);
    // The short name the map shows a generated place by, which players
    // then use: the model reads it as another name of the place.
    if !a.short_name.is_empty()
        && let Value::Object(fields) = &mut brief
    {
        fields.insert("short_name".into(), text(&a.short_name));
    }
    brief
}

/// The areas within [`NEARBY_STEPS`] moves of `here`, nearest first, at
/// most [`NEARBY_AREAS`], each as `{area_id, name}`.
fn nearby(state: &GameState, here: Option<&Area>) -> Vec<Value> {
    let Some(here) = here else {
        return state.areas.iter().take(NEARBY_AREAS).map(brief).collect();
    };
    let mut seen: HashSet<&str, foldhash::fast::RandomState> = HashSet::default();
    seen.insert(here.area_id.as_str());
    let mut ring = vec![here];
    let mut named = vec![brief(here)];
    for _ in 0..NEARBY_STEPS {
        let mut next = Vec::new();
        for area in ring {
            for id in &area.reachable_area_ids {
                if named.len() >= NEARBY_AREAS {
                    return named;
                }
                if seen.insert(id.as_str())
                    && let Some(a) = state.area(id.as_str())
                {
                    named.push(brief(a));
                    next.push(a);
                }
            }
        }
        ring = next;
    }
    named
}

/// The request for the text a tool asked to have written during `turn_id`,
/// from the tool's own (system, user) prompt: no tools, no context, and not
/// part of the conversation.
pub(super) fn content_request(turn_id: &TurnId, system: String, user: String) -> ModelRequest {
    ModelRequest {
        system,
        messages: vec![Arc::new(HistoryEntry::User {
            turn_id: turn_id.clone(),
            text: user,
            seat_id: None,
        })],
        tools: Arc::default(),
        context: Arc::default(),
        kind: RequestKind::Content,
        results: Vec::new(),
        fallback: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;
    use crate::game::state::AreaId;
    use crate::ids::SessionId;
    use crate::tools::Registry;
    use crate::tools::test_support::{SESSION, demo, session};

    /// The game master's tools in a session of `state`.
    fn gm_tools(registry: &Registry, state: &GameState, id: &SessionId) -> Arc<[Value]> {
        registry.openai_tools(&view(registry, state, id).game_master())
    }

    /// The players' messages a request carries, in order ("" for other
    /// entries).
    fn user_texts(request: &ModelRequest) -> Vec<&str> {
        request
            .messages
            .iter()
            .map(|m| match &**m {
                HistoryEntry::User { text, .. } => text.as_str(),
                _ => "",
            })
            .collect()
    }

    /// The ids of the areas a context names, in its order.
    fn area_ids(context: &Value) -> Vec<&str> {
        context["areas"]
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|a| a["area_id"].as_str())
            .collect()
    }

    /// An area with a name and nothing else, linked to nothing.
    fn bare_area(area_id: AreaId, name: &str) -> Area {
        Area {
            area_id,
            name: name.into(),
            description: String::new(),
            reachable_area_ids: Vec::new(),
            x: 0,
            y: 0,
            z: 0,
            tags: Vec::new(),
            group: String::new(),
            short_name: String::new(),
        }
    }

    fn view<'a>(
        registry: &'a Registry,
        state: &'a GameState,
        id: &'a SessionId,
    ) -> SessionView<'a> {
        SessionView {
            registry,
            state,
            session_id: id,
            tenant_id: {
                static TENANT: std::sync::LazyLock<crate::ids::TenantId> =
                    std::sync::LazyLock::new(|| "tenant_1".into());
                &TENANT
            },
        }
    }

    fn said(turn_id: &str, text: &str) -> Arc<HistoryEntry> {
        Arc::new(HistoryEntry::User {
            turn_id: turn_id.into(),
            text: text.into(),
            seat_id: None,
        })
    }

    fn tool_names(request: &ModelRequest) -> Vec<String> {
        request
            .tools
            .iter()
            .map(|t| {
                t["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn the_context_says_who_acts_where_they_stand_and_the_map() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let state = demo();
        let context = context_json(&view(&registry, &state, &id), 7, &[]);
        assert_eq!(context["session_id"], SESSION);
        assert_eq!(context["turn"], 7);
        assert_eq!(context["active_actor"]["character_id"], "pc_001");
        assert_eq!(context["active_actor"]["area_id"], "area_001");
        let here = &context["current_area"];
        assert_eq!(here["name"], "Lantern Gate");
        let reachable: Vec<&str> = here["reachable"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|a| a["area_id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(reachable, ["area_002", "area_003"]);
        assert_eq!(here["reachable"][0]["name"], "Lamplighter's Alcove");
        // The gate, its neighbours first, then what lies further.
        let named = area_ids(&context);
        assert_eq!(named[..3], ["area_001", "area_002", "area_003"]);
        assert!(named.len() <= state.areas.iter().count());
        assert_eq!(context["areas_total"], state.areas.iter().count());

        // A reachable id that names no area is shown as null; a state with
        // no active character has neither actor nor area.
        let mut odd = state.clone();
        assert!(odd.areas.link("area_001", &AreaId::from("area_404")));
        let context = context_json(&view(&registry, &odd, &id), 7, &[]);
        assert_eq!(context["current_area"]["reachable"][2], Value::Null);
        odd.active_actor_id = "nobody".into();
        let context = context_json(&view(&registry, &odd, &id), 7, &[]);
        assert_eq!(
            (&context["active_actor"], &context["current_area"]),
            (&Value::Null, &Value::Null)
        );
    }

    #[test]
    fn a_step_sees_the_history_with_what_is_in_flight_and_the_game_masters_tools() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        state.record(said("turn_1", "look around"));
        let in_flight = [said("turn_2", "go north")];
        for kind in [RequestKind::Step, RequestKind::WrapUp] {
            let request = model_request(
                &view(&registry, &state, &id),
                gm_tools(&registry, &state, &id),
                in_flight.clone(),
                0,
                Arc::new(context_json(&view(&registry, &state, &id), 2, &[])),
                kind,
                true,
            );
            assert_eq!(request.kind, kind);
            assert!(
                request.system.contains(&state.title),
                "the campaign's prompt"
            );
            let texts = user_texts(&request);
            assert_eq!(
                texts,
                ["look around", "go north"],
                "durable, then in flight"
            );
            assert_eq!(request.context["turn"], 2);
            let tools = tool_names(&request);
            assert!(
                tools.iter().all(|t| state.allowlist.contains(t)),
                "{tools:?}"
            );
            assert!(tools.iter().any(|t| t == "move"));
            assert!(!tools.iter().any(|t| t == "activate_npc"), "people only");
        }
    }

    #[test]
    fn the_context_names_the_areas_near_the_party_however_large_the_map() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        let total = state.areas.iter().count();
        // A long road from the gate, and a crossroads off it with more
        // branches than the context names.
        let far = |n: usize| AreaId::from(format!("far_{n}"));
        for n in 1..=100 {
            assert!(state.areas.push(bare_area(far(n), &format!("Road {n}"))));
        }
        assert!(state.areas.link("area_001", &far(1)));
        for n in 1..10 {
            assert!(state.areas.link(&format!("far_{n}"), &far(n + 1)));
        }
        let context = context_json(&view(&registry, &state, &id), 3, &[]);
        let named = area_ids(&context);
        assert_eq!(named[0], "area_001", "where the party stands first");
        assert!(named.contains(&"far_3"), "three moves away: {named:?}");
        assert!(!named.contains(&"far_4"), "four moves away: {named:?}");
        assert_eq!(context["areas_total"], total + 100);

        // Past the cap, the nearest are named.
        for n in 11..=100 {
            for hub in [1, 2] {
                state.areas.link(&format!("far_{hub}"), &far(n));
            }
        }
        let context = context_json(&view(&registry, &state, &id), 3, &[]);
        let named = context["areas"].as_array().expect("a list");
        assert!(named.len() <= NEARBY_AREAS, "{}", named.len());
        assert_eq!(named[0]["area_id"], "area_001");
    }

    #[test]
    fn in_a_party_the_history_says_who_spoke_and_alone_it_is_as_said() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let seated = |turn_id: &str, text: &str, seat: &str| {
            Arc::new(HistoryEntry::User {
                turn_id: turn_id.into(),
                text: text.into(),
                seat_id: Some(seat.into()),
            })
        };
        let round = "Round 1: resolve these actions together, in this order.\nBrin (pc_002): look";
        let request = |state: &GameState| {
            model_request(
                &view(&registry, state, &id),
                gm_tools(&registry, state, &id),
                [seated("turn_3", "go north", "seat_1")],
                0,
                Arc::new(context_json(&view(&registry, state, &id), 3, &[])),
                RequestKind::Step,
                true,
            )
        };
        let mut state = demo();
        state.record(seated("turn_1", "I open the door", "seat_1"));
        state.record(said("turn_2", round));
        let alone = request(&state);
        assert_eq!(
            user_texts(&alone),
            ["I open the door", round, "go north"],
            "a lone player's words are sent as said"
        );
        let host = state.party.host().expect("the host").name.clone();
        crate::tools::test_support::seat(&mut state, 2, "Brin", "area_002");
        state.record(seated("turn_2b", "I open the door", "seat_2"));
        let party = request(&state);
        assert_eq!(
            user_texts(&party),
            [
                format!("{host}: I open the door"),
                round.to_owned(),
                "Brin: I open the door".to_owned(),
                "go north".to_owned(),
            ],
            "each earlier line names its speaker (a round's names everyone already); \
             the turn at hand is as said, its speaker in the context"
        );
        let journal: Vec<&str> = state
            .history
            .iter()
            .filter_map(|e| match &**e {
                HistoryEntry::User { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            journal[0], "I open the door",
            "the state keeps the words as said"
        );
    }

    #[test]
    fn in_a_party_the_context_names_the_speaker_and_the_party() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        let alone = context_json(&view(&registry, &state, &id), 1, &["pc_001".into()]);
        assert!(
            alone.get("party").is_none() && alone.get("speaker").is_none(),
            "a lone player's context is as before"
        );
        crate::tools::test_support::seat(&mut state, 2, "Brin", "area_002");
        let speaking: &[CharacterId] = &["pc_002".into()];
        let mut cache = ContextCache::default();
        let context = cache.get(&view(&registry, &state, &id), 1, speaking);
        assert_eq!(
            context["active_actor"]["character_id"], "pc_002",
            "the speaker acts"
        );
        assert_eq!(
            context["current_area"]["area_id"], "area_002",
            "where the speaker stands"
        );
        assert_eq!(
            context["speaker"],
            serde_json::json!({"name": "Brin", "character_id": "pc_002"})
        );
        let party = context["party"].as_array().expect("the party");
        assert_eq!(party.len(), 2);
        assert_eq!(
            (party[1]["seat_id"].as_str(), party[1]["acting"].as_bool()),
            (Some("seat_2"), Some(true))
        );
        assert_eq!(party[0]["acting"], false);
        // The host's next turn reads the context again, for the host.
        let host = cache.get(&view(&registry, &state, &id), 2, &["pc_001".into()]);
        assert_eq!(host["active_actor"]["character_id"], "pc_001");
    }

    #[test]
    fn the_kept_context_is_the_one_built_afresh_until_the_state_changes() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        let mut cache = ContextCache::default();
        let first = cache.get(&view(&registry, &state, &id), 1, &[]);
        assert_eq!(*first, context_json(&view(&registry, &state, &id), 1, &[]));
        // The next turn, no effect between: the same context, its turn
        // written in place once no request holds the last one.
        let held = cache.get(&view(&registry, &state, &id), 2, &[]);
        assert_eq!(first["turn"], 1, "a request's context never changes");
        assert_eq!(*held, context_json(&view(&registry, &state, &id), 2, &[]));
        drop((first, held));
        let again = cache.get(&view(&registry, &state, &id), 3, &[]);
        assert_eq!(*again, context_json(&view(&registry, &state, &id), 3, &[]));
        drop(again);
        // An effect: the next request reads the state again.
        let new_area = AreaId::from("area_new");
        assert!(state.areas.push(bare_area(new_area.clone(), "New Hall")));
        assert!(state.areas.link("area_001", &new_area));
        cache.state_changed();
        let fresh = cache.get(&view(&registry, &state, &id), 3, &[]);
        assert_eq!(*fresh, context_json(&view(&registry, &state, &id), 3, &[]));
        assert!(area_ids(&fresh).contains(&"area_new"), "{fresh}");
    }

    #[test]
    fn a_model_that_reads_only_the_turn_at_hand_gets_only_it() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        state.record(said("turn_1", "look around"));
        state.record(said("turn_2", "go north"));
        let in_flight = [said("turn_2", "and then east")];
        let request = model_request(
            &view(&registry, &state, &id),
            gm_tools(&registry, &state, &id),
            in_flight,
            6000,
            Arc::new(context_json(&view(&registry, &state, &id), 2, &[])),
            RequestKind::Step,
            false,
        );
        let texts = user_texts(&request);
        assert_eq!(texts, ["and then east"], "from the last player message on");
        assert!(request.system.is_empty());
        assert_eq!(request.context["turn"], 2, "the context is whole");
        assert!(!tool_names(&request).is_empty(), "and so are the tools");
    }

    #[test]
    fn a_step_keeps_to_the_history_budget() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        for n in 0..40 {
            let text = format!("a long message number {n} {}", "word ".repeat(40));
            state.record(said(&format!("turn_{n}"), &text));
        }
        let whole = model_request(
            &view(&registry, &state, &id),
            gm_tools(&registry, &state, &id),
            [],
            0,
            Arc::new(context_json(&view(&registry, &state, &id), 41, &[])),
            RequestKind::Step,
            true,
        );
        assert_eq!(whole.messages.len(), 40, "0 is no limit");
        let cut = model_request(
            &view(&registry, &state, &id),
            gm_tools(&registry, &state, &id),
            [],
            500,
            Arc::new(context_json(&view(&registry, &state, &id), 41, &[])),
            RequestKind::Step,
            true,
        );
        assert!(cut.messages.len() < 40, "the oldest turns are cut");
        assert!(cut.system.len() > whole.system.len(), "and summarized");
    }

    #[test]
    fn a_content_request_has_the_tools_prompt_and_nothing_else() {
        let request = content_request(&"turn_3".into(), "write zones".into(), "salt".into());
        assert_eq!(request.kind, RequestKind::Content);
        assert_eq!(request.system, "write zones");
        assert!(request.tools.is_empty());
        assert_eq!(*request.context, Value::Null);
        assert!(matches!(
            &*request.messages[0],
            HistoryEntry::User { turn_id, text, .. } if turn_id == "turn_3" && text == "salt"
        ));
        assert_eq!(request.messages.len(), 1);
    }

    #[test]
    fn a_turns_request_puts_a_correction_after_the_history_without_keeping_it() {
        let (registry, id) = (Registry::builtin().expect("tools"), session());
        let mut state = demo();
        state.record(said("turn_1", "look around"));
        let mut turn = Turn::new("turn_2".into(), 2, "tr_1".into(), 4);
        turn.keep_result(serde_json::json!({"rolled": 4}));
        let mut prompter = Prompter::default();
        // (correction, the players' messages the model reads)
        let cases = [
            (
                Some(("{broken".to_owned(), "answer as JSON".to_owned())),
                vec!["look around", "go north", "", "answer as JSON"],
            ),
            (None, vec!["look around", "go north"]),
        ];
        for (correction, want) in cases {
            let request = prompter.turn_request(
                &view(&registry, &state, &id),
                &turn,
                &[],
                [said("turn_2", "go north")],
                correction,
                0,
                RequestKind::Step,
                true,
            );
            assert_eq!(user_texts(&request), want);
            assert_eq!(request.context["turn"], 2, "the turn's number");
            assert_eq!(request.tools, gm_tools(&registry, &state, &id));
            assert_eq!(*request.results[0], serde_json::json!({"rolled": 4}));
        }
    }
}
