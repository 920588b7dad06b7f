//! `update_character`: set a character's hp, max_hp, level or stats.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::update_inventory::aliased;
use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::error::{ErrorCode, Reason};
use crate::game::{Character, CharacterState, Effect};

// The hp and level bounds are the save state's own, shared with campaigns.
use crate::game::state::MAX_STATS_PER_CHARACTER;
pub use crate::game::state::{MAX_HP, MAX_LEVEL};
/// Range of one stat value.
pub const STAT_MIN: i64 = -100;
pub const STAT_MAX: i64 = 1000;
/// Most stats set in one call.
pub const MAX_STATS: usize = 32;

pub struct UpdateCharacter;

// Something to change; max_hp and maxHp both given are refused by run().
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("anyOf" = [
    {"required": ["hp"]},
    {"required": ["max_hp"]},
    {"required": ["maxHp"]},
    {"required": ["level"]},
    {"required": ["stats"]}
]))]
struct Args {
    /// whose sheet; default the active character
    #[schemars(length(min = 1, max = 64))]
    character_id: Option<String>,
    /// new hp; clamped to max_hp
    #[schemars(range(min = 0, max = MAX_HP))]
    hp: Option<i64>,
    #[schemars(range(min = 1, max = MAX_HP))]
    max_hp: Option<i64>,
    // Seed 001's spelling of `max_hp`; at most one of the two is given.
    /// the same as max_hp (give one of the two)
    #[serde(rename = "maxHp")]
    #[schemars(range(min = 1, max = MAX_HP))]
    max_hp_camel: Option<i64>,
    #[schemars(range(min = 1, max = MAX_LEVEL))]
    level: Option<u32>,
    /// stats to set, e.g. {"str": 14}; stats not named keep their values
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = MAX_STATS,
        "propertyNames" = {"pattern": "^[a-z_]{1,32}$"},
        "additionalProperties" = {"type": "integer", "minimum": STAT_MIN, "maximum": STAT_MAX},
    ))]
    stats: Option<BTreeMap<String, i64>>,
}

/// Whether `key` matches `^[a-z_]{1,32}$`.
fn valid_stat_key(key: &str) -> bool {
    (1..=32).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

impl Tool for UpdateCharacter {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "update_character",
            "Update character",
            "character",
            "Set a character's hp, max_hp, level or stats (default: the active character; stats \
             are merged into the existing ones). max_hp applies first and hp is kept within 0..max_hp; 0 hp downs the character. Use \
             hp_delta for ordinary damage and healing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["success", "message", "character", "changed"],
                "properties": {
                    "success": {"const": true},
                    "message": {"type": "string"},
                    "character": {
                        "type": "object",
                        "required": ["character_id", "name", "hp", "max_hp", "level", "stats", "inventory", "state"]
                    },
                    "changed": {
                        "type": "array",
                        "items": {"enum": ["hp", "max_hp", "level", "stats", "state"]}
                    }
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let mut args: Args = super::typed(args)?;
        args.max_hp = aliased(
            args.max_hp,
            args.max_hp_camel.take(),
            "",
            ("max_hp", "maxHp"),
        )?;
        let id = args
            .character_id
            .as_deref()
            .unwrap_or(ctx.actor_id().as_str());
        let c = character(ctx.state, id)?;
        if args.hp.is_none()
            && args.max_hp.is_none()
            && args.level.is_none()
            && args.stats.is_none()
        {
            return Err(ToolError::invalid_args(
                "nothing to change; give at least one of hp, max_hp, level, stats",
            ));
        }
        if let Some(hp) = args.hp.filter(|hp| !(0..=MAX_HP).contains(hp)) {
            return Err(ToolError::invalid_args(format!(
                "hp {hp} is out of range; give 0 to {MAX_HP}"
            )));
        }
        if let Some(max) = args.max_hp.filter(|m| !(1..=MAX_HP).contains(m)) {
            return Err(ToolError::invalid_args(format!(
                "max_hp {max} is out of range; give 1 to {MAX_HP}"
            )));
        }
        if let Some(level) = args.level.filter(|l| !(1..=MAX_LEVEL).contains(l)) {
            return Err(ToolError::invalid_args(format!(
                "level {level} is out of range; give 1 to {MAX_LEVEL}"
            )));
        }
        if let Some(stats) = &args.stats {
            if stats.is_empty() || stats.len() > MAX_STATS {
                return Err(ToolError::invalid_args(format!(
                    "stats names {}; give 1 to {MAX_STATS} stats",
                    stats.len()
                )));
            }
            for (key, value) in stats {
                if !valid_stat_key(key) {
                    return Err(ToolError::invalid_args(format!(
                        "stat name {key:?} must be 1 to 32 of a-z and _, e.g. str"
                    )));
                }
                if !(STAT_MIN..=STAT_MAX).contains(value) {
                    return Err(ToolError::invalid_args(format!(
                        "stat {key} = {value} is out of range; give {STAT_MIN} to {STAT_MAX}"
                    )));
                }
            }
        }

        let mut updated = c.clone();
        if let Some(max) = args.max_hp {
            updated.max_hp = max;
        }
        updated.hp = args
            .hp
            .unwrap_or(updated.hp)
            .clamp(0, updated.max_hp.max(0));
        updated.state = if updated.hp == 0 {
            CharacterState::Downed
        } else {
            CharacterState::Active
        };
        if let Some(level) = args.level {
            updated.level = level;
        }
        if let Some(stats) = args.stats {
            for (key, value) in stats {
                updated.stats.insert(key, json!(value));
            }
            // Each call names few stats, but calls add up.
            if updated.stats.len() > MAX_STATS_PER_CHARACTER {
                return Err(ToolError::new(
                    Reason::InvalidActorState,
                    ErrorCode::InvalidArgs,
                    format!(
                        "{} would have {} stats, more than the {MAX_STATS_PER_CHARACTER} one \
                         character may have; set stats it already has instead",
                        c.name,
                        updated.stats.len()
                    ),
                ));
            }
        }

        let changed: Vec<&str> = [
            ("hp", updated.hp != c.hp),
            ("max_hp", updated.max_hp != c.max_hp),
            ("level", updated.level != c.level),
            ("stats", updated.stats != c.stats),
            ("state", updated.state != c.state),
        ]
        .into_iter()
        .filter_map(|(name, differs)| differs.then_some(name))
        .collect();
        Ok(ToolOutput {
            result: json!({
                "success": true,
                "message": character_message(&updated, &changed),
                "character": updated,
                "changed": changed,
            }),
            effect: Some(Effect::SetCharacter { character: updated }),
        })
    }
}

/// What changed, as seed 001's front end shows it (`HP -> 9, ...`).
fn character_message(c: &Character, changed: &[&str]) -> String {
    let said: Vec<String> = changed
        .iter()
        .map(|field| match *field {
            "hp" => format!("HP -> {}", c.hp),
            "max_hp" => format!("max HP -> {}", c.max_hp),
            "level" => format!("level -> {}", c.level),
            "state" => format!("state -> {}", crate::error::wire_name(&c.state)),
            _ => "stats updated".to_owned(),
        })
        .collect();
    if said.is_empty() {
        format!("{}: nothing changed", c.name)
    } else {
        format!("{}: {}", c.name, said.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;

    use crate::tools::Role;
    use crate::tools::test_support::{assert_refusals, ctx_run, demo, pipeline};

    fn invoke(state: &GameState, args: Value, role: Role) -> Result<ToolOutput, ToolError> {
        pipeline("update_character", state, args, role)
    }

    #[test]
    fn max_hp_first_then_hp_clamped_and_state_follows() {
        let mut state = demo();
        // (args besides character_id, hp, max_hp, state, changed)
        let cases = [
            (json!({"hp": 0}), 0, 12, "downed", vec!["hp", "state"]),
            (json!({"hp": 3}), 3, 12, "active", vec!["hp", "state"]),
            (
                json!({"hp": 500, "max_hp": 20}),
                20,
                20,
                "active",
                vec!["hp", "max_hp"],
            ),
            (json!({"max_hp": 8}), 8, 8, "active", vec!["hp", "max_hp"]),
            (json!({"max_hp": 30}), 8, 30, "active", vec!["max_hp"]),
            (json!({"hp": 8}), 8, 30, "active", vec![]),
        ];
        for (extra, hp, max_hp, st, changed) in cases {
            let mut args = extra.clone();
            args["character_id"] = json!("pc_001");
            let out = ctx_run(&UpdateCharacter, &state, &args).unwrap();
            let ch = &out.result["character"];
            assert_eq!(
                (
                    ch["hp"].as_i64(),
                    ch["max_hp"].as_i64(),
                    ch["state"].as_str()
                ),
                (Some(hp), Some(max_hp), Some(st)),
                "{extra}"
            );
            assert_eq!(out.result["changed"], json!(changed), "{extra}");
            state.apply(out.effect.as_ref().unwrap());
            let c = state.character("pc_001").unwrap();
            assert_eq!(&serde_json::to_value(c).unwrap(), ch, "{extra}");
        }
    }

    #[test]
    fn stats_merge_and_level_sets() {
        let mut state = demo();
        let out = ctx_run(
            &UpdateCharacter,
            &state,
            &json!({"character_id": "npc_002", "level": 4, "stats": {"str": 16, "luck": -2}}),
        )
        .unwrap();
        assert_eq!(out.result["changed"], json!(["level", "stats"]));
        state.apply(out.effect.as_ref().unwrap());
        let once = state.clone();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state, once);
        let c = state.character("npc_002").unwrap();
        assert_eq!(c.level, 4);
        assert_eq!(
            serde_json::to_value(&c.stats).unwrap(),
            json!({"str": 16, "dex": 9, "con": 12, "int": 12, "wis": 16, "cha": 13, "luck": -2})
        );
        assert_eq!(c.inventory.len(), 2, "the rest of the sheet is kept");
    }

    #[test]
    fn bad_values_are_refused() {
        let state = demo();
        let cases = [
            (
                json!({"character_id": "ghost", "hp": 1}),
                Reason::NotFound,
                "pc_001",
            ),
            (
                json!({"character_id": "pc_001"}),
                Reason::InvalidArgs,
                "at least one of",
            ),
            (
                json!({"character_id": "pc_001", "hp": -1}),
                Reason::InvalidArgs,
                "hp -1",
            ),
            (
                json!({"character_id": "pc_001", "max_hp": 0}),
                Reason::InvalidArgs,
                "max_hp 0",
            ),
            (
                json!({"character_id": "pc_001", "level": 101}),
                Reason::InvalidArgs,
                "level 101",
            ),
            (
                json!({"character_id": "pc_001", "stats": {}}),
                Reason::InvalidArgs,
                "1 to 32",
            ),
            (
                json!({"character_id": "pc_001", "stats": {"Str": 1}}),
                Reason::InvalidArgs,
                "\"Str\"",
            ),
            (
                json!({"character_id": "pc_001", "stats": {"str": 1001}}),
                Reason::InvalidArgs,
                "str = 1001",
            ),
            (
                json!({"character_id": "pc_001", "stats": {"str": "high"}}),
                Reason::InvalidArgs,
                "invalid type",
            ),
        ];
        assert_refusals(cases, |a| ctx_run(&UpdateCharacter, &state, a));
    }

    #[test]
    fn the_schema_refuses_bad_shapes() {
        let state = demo();
        let cases = [
            (json!({}), "anyOf"),
            (json!({"character_id": "pc_001"}), "character_id"),
            (json!({"maxHp": 0}), "/maxHp"),
            (json!({"character_id": "pc_001", "hp": -1}), "/hp"),
            (
                json!({"character_id": "pc_001", "max_hp": 100001}),
                "/max_hp",
            ),
            (json!({"character_id": "pc_001", "level": 0}), "/level"),
            (json!({"character_id": "pc_001", "stats": {}}), "/stats"),
            (
                json!({"character_id": "pc_001", "stats": {"STR": 1}}),
                "/stats",
            ),
            (
                json!({"character_id": "pc_001", "stats": {"str": 1.5}}),
                "/stats/str",
            ),
            (
                json!({"character_id": "pc_001", "stats": {"str": -101}}),
                "/stats/str",
            ),
            (json!({"character_id": "pc_001", "name": "Bob"}), "name"),
        ];
        for (args, text) in cases {
            let e = invoke(&state, args.clone(), Role::GameMaster).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{args}");
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
        let ok = invoke(
            &state,
            json!({"character_id": "pc_001", "stats": {"str": 12}}),
            Role::GameMaster,
        )
        .unwrap();
        assert_eq!(ok.result["changed"], json!(["stats"]));
        let e = invoke(
            &state,
            json!({"character_id": "pc_001", "hp": 1}),
            Role::Player,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::PermissionDenied);
    }

    #[test]
    fn the_seeds_arguments_change_the_active_character() {
        // Seed 001: `hp?, maxHp?, level?, stats?`, no character named.
        let mut state = demo();
        let out = invoke(
            &state,
            json!({"hp": 15, "maxHp": 20, "level": 2, "stats": {"str": 12}}),
            Role::GameMaster,
        )
        .unwrap();
        assert_eq!(out.result["character"]["character_id"], "pc_001");
        assert_eq!(
            out.result["changed"],
            json!(["hp", "max_hp", "level", "stats"])
        );
        state.apply(out.effect.as_ref().unwrap());
        let c = state.character("pc_001").unwrap();
        assert_eq!((c.hp, c.max_hp, c.level), (15, 20, 2));
        // maxHp is max_hp under another name.
        let snake = invoke(&demo(), json!({"max_hp": 30}), Role::GameMaster).unwrap();
        let camel = invoke(&demo(), json!({"maxHp": 30}), Role::GameMaster).unwrap();
        assert_eq!(camel, snake);
        assert_eq!(camel.result["character"]["max_hp"], 30);
        // A named character is still the one changed.
        let npc = invoke(
            &demo(),
            json!({"character_id": "npc_002", "hp": 1}),
            Role::GameMaster,
        )
        .unwrap();
        assert_eq!(npc.result["character"]["character_id"], "npc_002");
    }

    #[test]
    fn max_hp_under_both_names_is_refused() {
        let both = json!({"max_hp": 20, "maxHp": 20});
        for e in [
            invoke(&demo(), both.clone(), Role::GameMaster).unwrap_err(),
            ctx_run(&UpdateCharacter, &demo(), &both).unwrap_err(),
        ] {
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs)
            );
            assert!(
                e.message
                    .contains("max_hp and maxHp are the same field under two names"),
                "{}",
                e.message
            );
        }
        let mut nobody = demo();
        nobody.active_actor_id = "ghost".into();
        let e = ctx_run(&UpdateCharacter, &nobody, &json!({"hp": 1})).unwrap_err();
        assert_eq!(e.reason, Reason::NotFound);
    }

    #[test]
    fn stats_added_over_many_calls_stay_bounded() {
        let mut state = demo();
        let mut n = state.character("pc_001").unwrap().stats.len();
        let mut round = 0;
        let refused = loop {
            let stats: BTreeMap<String, i64> = (0..MAX_STATS)
                .map(|i| (format!("s{}", letters(round * MAX_STATS + i)), 1))
                .collect();
            match ctx_run(
                &UpdateCharacter,
                &state,
                &json!({"character_id": "pc_001", "stats": stats}),
            ) {
                Ok(out) => state.apply(out.effect.as_ref().unwrap()),
                Err(e) => break e,
            }
            n = state.character("pc_001").unwrap().stats.len();
            round += 1;
        };
        assert!(n <= MAX_STATS_PER_CHARACTER, "{n}");
        assert_eq!(refused.reason, Reason::InvalidActorState);
        assert!(refused.message.contains("64"), "{}", refused.message);
    }

    /// `n` in letters (a, b, ..., z, ba, bb, ...), for stat names, which
    /// may hold only a-z and _.
    fn letters(mut n: usize) -> String {
        let mut s = Vec::new();
        loop {
            s.push(b'a' + (n % 26) as u8);
            n /= 26;
            if n == 0 {
                break;
            }
        }
        s.reverse();
        String::from_utf8(s).unwrap()
    }
}
