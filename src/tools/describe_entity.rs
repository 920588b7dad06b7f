//! `describe_entity`: the JSON Schema of a game entity, with each field explained.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::entities::{self, ENTITY_NAMES};

pub struct DescribeEntity;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// entity name, e.g. Character
    #[schemars(length(min = 1, max = 40))]
    name: String,
}

impl Tool for DescribeEntity {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "describe_entity",
            "Describe entity",
            "schema",
            "Read what a Character, Area, Item, Npc or Zone looks like: its JSON Schema with every \
             field described (Chinese names such as 角色 work too). Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["entity", "names", "description", "schema"],
                "properties": {
                    "entity": {"enum": ENTITY_NAMES},
                    "names": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "description": {"type": "string"},
                    "schema": {"type": "object"}
                }
            }),
        )
        .sessionless()
    }

    fn run(&self, args: &Value, _ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let Some(found) = entities::describe(&args.name) else {
            let shown: String = args.name.chars().take(40).collect();
            return Err(ToolError::new(
                Reason::NotFound,
                ErrorCode::InvalidArgs,
                format!("no entity {shown:?}; entities: {}", ENTITY_NAMES.join(", ")),
            ));
        };
        let result = serde_json::to_value(&found).map_err(|e| {
            ToolError::new(
                Reason::ExecutionFailed,
                ErrorCode::ExecutionFailed,
                format!("could not describe {}: {e}", found.entity),
            )
        })?;
        Ok(ToolOutput {
            result,
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline, run_as};

    fn invoke(args: Value, role: Role) -> Result<ToolOutput, ToolError> {
        pipeline("describe_entity", &demo(), args, role)
    }

    #[test]
    fn describes_by_any_name() {
        let state = demo();
        let cases = [
            ("Character", "Character"),
            (" item ", "Item"),
            ("角色", "Character"),
            ("NPC", "Npc"),
            ("地带", "Zone"),
        ];
        for (name, entity) in cases {
            let out = ctx_run(&DescribeEntity, &state, &json!({"name": name})).unwrap();
            assert_eq!(out.effect, None);
            assert_eq!(out.result["entity"], entity, "{name}");
            let want = serde_json::to_value(entities::describe(entity).unwrap()).unwrap();
            assert_eq!(out.result, want, "{name}");
            assert_eq!(out.result["schema"]["type"], "object");
        }
    }

    #[test]
    fn every_role_may_read() {
        let state = demo();
        for role in crate::tools::ALL_ROLES {
            let out = run_as(&DescribeEntity, &state, &json!({"name": "Area"}), *role).unwrap();
            assert_eq!(out.result["entity"], "Area");
            let out = invoke(json!({"name": "Area"}), *role).unwrap();
            assert_eq!(out.result["names"][0], "Area", "{role:?}");
        }
        assert!(!DescribeEntity.spec().needs_session);
        assert!(DescribeEntity.spec().read_only);
    }

    #[test]
    fn unknown_names_list_the_entities() {
        let e = ctx_run(&DescribeEntity, &demo(), &json!({"name": "Dragon"})).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::InvalidArgs)
        );
        assert!(
            e.message.contains("\"Dragon\"")
                && e.message.contains("Character, Area, Item, Npc, Zone"),
            "{}",
            e.message
        );
        let e = ctx_run(&DescribeEntity, &demo(), &json!({})).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidArgs);
    }

    #[test]
    fn the_schema_refuses_bad_shapes() {
        let cases = [
            (json!({}), "name"),
            (json!({"name": ""}), "/name"),
            (json!({"name": "x".repeat(41)}), "/name"),
            (json!({"name": 3}), "/name"),
            (json!({"name": "Item", "fields": true}), "fields"),
        ];
        for (args, text) in cases {
            let e = invoke(args.clone(), Role::Player).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{args}");
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
        let e = invoke(json!({"name": "Dragon"}), Role::Player).unwrap_err();
        assert_eq!(e.reason, Reason::NotFound);
    }
}
