//! `get_site_map`: every area, route, point of interest and zone, for drawing the map (read-only).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::content::ContentStatus;
use crate::game::{Area, GameState};

pub struct GetSiteMap;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default = "yes")]
    include_pois: bool,
    #[serde(default)]
    include_routes: bool,
}

fn yes() -> bool {
    true
}

/// The site a map belongs to: the site the call runs on, or in a session
/// the campaign it was started from.
fn site_id<'a>(ctx: &'a ToolContext<'_>) -> &'a str {
    ctx.site_id.unwrap_or(&ctx.state.campaign_id)
}

/// Straight-line distance between two areas on the x/y plane, to 0.1.
fn distance(a: &Area, b: &Area) -> f64 {
    let dx = a.x as f64 - b.x as f64;
    let dy = a.y as f64 - b.y as f64;
    (dx.hypot(dy) * 10.0).round() / 10.0
}

/// Each connection once, `from < to`, sorted; links to unknown areas or to
/// the area itself are left out.
fn routes(state: &GameState) -> Vec<Value> {
    let mut pairs: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for a in state.areas.iter() {
        for n in &a.reachable_area_ids {
            let Some(b) = state.area(n.as_str()) else {
                continue;
            };
            let (from, to) = match a.area_id.cmp(&b.area_id) {
                std::cmp::Ordering::Less => (a, b),
                std::cmp::Ordering::Greater => (b, a),
                std::cmp::Ordering::Equal => continue,
            };
            pairs
                .entry((from.area_id.as_str(), to.area_id.as_str()))
                .or_insert_with(|| distance(from, to));
        }
    }
    pairs
        .into_iter()
        .map(|((from, to), distance)| json!({"from": from, "to": to, "distance": distance}))
        .collect()
}

/// NPC characters standing in an area, then published `poi` content placed in one.
fn pois(state: &GameState) -> Vec<Value> {
    let npcs = state
        .characters
        .iter()
        .filter(|c| c.kind == "npc" && state.area(c.area_id.as_str()).is_some())
        .map(|c| {
            json!({
                "poi_id": c.character_id, "id": c.character_id, "name": c.name,
                "kind": "npc", "type": "npc", "area_id": c.area_id,
            })
        });
    let content = state
        .content
        .iter()
        .filter(|e| e.status == ContentStatus::Published && e.content_type == "poi")
        .filter_map(|e| {
            let area = e.area_id.as_deref().and_then(|a| state.area(a))?;
            Some(json!({
                "poi_id": e.content_id,
                "id": e.content_id,
                "name": e.title,
                "kind": "content",
                "type": "content",
                "area_id": area.area_id,
            }))
        });
    npcs.chain(content).collect()
}

impl Tool for GetSiteMap {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "get_site_map",
            "Site map",
            "map",
            "Read the whole map at once: the site's id and name, areas with their x/y/z positions, \
             points of interest (NPCs and poi content by area), open-world zones and, with \
             include_routes, routes between areas with distances. Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["site_id", "site_name", "areas", "routes", "pois", "zones"],
                "properties": {
                    "site_id": {"type": "string"},
                    "site_name": {"type": "string"},
                    "areas": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["area_id", "name", "x", "y", "z", "tags"],
                            "properties": {
                                "area_id": {"type": "string"},
                                "name": {"type": "string"},
                                "x": {"type": "integer"},
                                "y": {"type": "integer"},
                                "z": {"type": "integer"},
                                "tags": {"type": "array", "items": {"type": "string"}}
                            }
                        }
                    },
                    "routes": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["from", "to", "distance"],
                            "properties": {
                                "from": {"type": "string"},
                                "to": {"type": "string"},
                                "distance": {"type": "number", "minimum": 0}
                            }
                        }
                    },
                    "pois": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["poi_id", "id", "name", "kind", "type", "area_id"],
                            "properties": {
                                "poi_id": {"type": "string"},
                                "id": {"type": "string"},
                                "name": {"type": "string"},
                                "kind": {"enum": ["npc", "content"]},
                                "type": {"enum": ["npc", "content"]},
                                "area_id": {"type": "string"}
                            }
                        }
                    },
                    "zones": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["zone_id", "name", "x", "y", "z"],
                            "properties": {
                                "zone_id": {"type": "string"},
                                "name": {"type": "string"},
                                "x": {"type": "integer"},
                                "y": {"type": "integer"},
                                "z": {"type": "integer"}
                            }
                        }
                    }
                }
            }),
        )
        .on_sites()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        let areas: Vec<Value> = state
            .areas
            .iter()
            .map(|a| {
                json!({"area_id": a.area_id, "name": a.name, "x": a.x, "y": a.y, "z": a.z, "tags": a.tags})
            })
            .collect();
        let zones: Vec<Value> = state
            .zones
            .iter()
            .map(|z| json!({"zone_id": z.zone_id, "name": z.name, "x": z.x, "y": z.y, "z": z.z}))
            .collect();
        Ok(ToolOutput {
            result: json!({
                "site_id": site_id(ctx),
                "site_name": state.title,
                "areas": areas,
                "routes": if args.include_routes { routes(state) } else { Vec::new() },
                "pois": if args.include_pois { pois(state) } else { Vec::new() },
                "zones": zones,
            }),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, Reason};
    use crate::game::Effect;
    use crate::game::content::ContentEntry;

    use crate::game::zones::Zone;
    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline};

    fn invoke(state: &GameState, args: Value) -> Result<ToolOutput, ToolError> {
        pipeline("get_site_map", state, args, Role::Player)
    }

    fn route<'a>(out: &'a ToolOutput, from: &str, to: &str) -> Option<&'a Value> {
        out.result["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["from"] == from && r["to"] == to)
    }

    #[test]
    fn lists_areas_routes_once_and_distances() {
        let state = demo();
        let out = invoke(&state, json!({"include_routes": true})).unwrap();
        assert!(out.effect.is_none());
        let areas = out.result["areas"].as_array().unwrap();
        assert_eq!(areas.len(), state.areas.len());
        assert_eq!(
            areas[0],
            json!({"area_id": "area_001", "name": "Lantern Gate", "x": 90, "y": 250, "z": 0,
                   "tags": ["entrance", "lit", "shallow_water"]})
        );
        let routes = out.result["routes"].as_array().unwrap();
        // Every link once: half the (symmetric) reachable lists.
        let links: usize = state.areas.iter().map(|a| a.reachable_area_ids.len()).sum();
        assert_eq!(routes.len(), links / 2);
        assert!(
            routes
                .iter()
                .all(|r| r["from"].as_str().unwrap() < r["to"].as_str().unwrap())
        );
        // area_001 (90,250) to area_002 (170,110): sqrt(80² + 140²) = 161.245...
        assert_eq!(
            route(&out, "area_001", "area_002").unwrap()["distance"],
            161.2
        );
        // area_003 (230,340) to area_005 (360,420): sqrt(130² + 80²) = 152.643...
        assert_eq!(
            route(&out, "area_003", "area_005").unwrap()["distance"],
            152.6
        );
        assert!(route(&out, "area_002", "area_001").is_none());
        assert!(route(&out, "area_001", "area_009").is_none());
        assert_eq!(out.result["zones"], json!([]));
    }

    #[test]
    fn one_way_and_dangling_links_are_handled() {
        let mut state = demo();
        // A one-way link still makes one route; a link to nowhere and a
        // self-link make none.
        let mut areas = state.areas.to_vec();
        let a9 = areas.iter_mut().find(|a| a.area_id == *"area_009").unwrap();
        a9.reachable_area_ids
            .extend(["area_001".into(), "area_404".into(), "area_009".into()]);
        state.areas = areas.into();
        let out = ctx_run(&GetSiteMap, &state, &json!({"include_routes": true})).unwrap();
        let r = route(&out, "area_001", "area_009").unwrap();
        // (90,250) to (710,300): sqrt(620² + 50²) = 622.012...
        assert_eq!(r["distance"], 622.0);
        let routes = out.result["routes"].as_array().unwrap();
        assert!(
            routes
                .iter()
                .all(|r| r["to"] != "area_404" && r["from"] != r["to"])
        );
    }

    #[test]
    fn pois_are_npcs_and_published_poi_content() {
        let mut state = demo();
        // A draft poi and a poi placed nowhere are not shown.
        for (id, status, area) in [
            ("draft_poi", ContentStatus::Draft, Some("area_001")),
            ("lost_poi", ContentStatus::Published, Some("area_404")),
            ("floating_poi", ContentStatus::Published, None),
        ] {
            state.apply(&Effect::AddContent {
                entry: ContentEntry {
                    content_id: id.into(),
                    content_type: "poi".into(),
                    title: id.into(),
                    body: "b".into(),
                    tags: vec![],
                    status,
                    area_id: area.map(crate::ids::AreaId::from),
                    created_by: "game_master".into(),
                    about: Default::default(),
                },
            });
        }
        let out = ctx_run(&GetSiteMap, &state, &json!({"include_routes": false})).unwrap();
        assert_eq!(out.result["routes"], json!([]));
        assert_eq!(
            out.result["pois"],
            json!([
                {"poi_id": "npc_001", "id": "npc_001", "name": "Old Maren", "kind": "npc", "type": "npc", "area_id": "area_002"},
                {"poi_id": "npc_002", "id": "npc_002", "name": "Brother Silt", "kind": "npc", "type": "npc", "area_id": "area_005"},
                {"poi_id": "npc_003", "id": "npc_003", "name": "The Drowned Warden", "kind": "npc", "type": "npc", "area_id": "area_009"},
                {"poi_id": "poi_tide_clock", "id": "poi_tide_clock", "name": "The Brass Tide Clock", "kind": "content", "type": "content", "area_id": "area_006"},
                {"poi_id": "poi_heart_lantern", "id": "poi_heart_lantern", "name": "The Heart Lantern", "kind": "content", "type": "content", "area_id": "area_009"},
                {"poi_id": "poi_chapel_altar", "id": "poi_chapel_altar", "name": "无油之灯", "kind": "content", "type": "content", "area_id": "area_005"},
            ])
        );
        let out = ctx_run(
            &GetSiteMap,
            &state,
            &json!({"include_pois": false, "include_routes": true}),
        )
        .unwrap();
        assert_eq!(out.result["pois"], json!([]));
        assert!(!out.result["routes"].as_array().unwrap().is_empty());
    }

    #[test]
    fn names_the_site_and_leaves_routes_out_unless_asked() {
        let state = demo();
        let out = invoke(&state, json!({})).unwrap();
        assert_eq!(out.result["site_id"], "demo");
        assert_eq!(out.result["site_name"], "The Drowned Lanterns");
        assert_eq!(out.result["routes"], json!([]));
        assert_eq!(out.result["pois"].as_array().unwrap().len(), 6);
        assert_eq!(out.result["pois"][0]["id"], out.result["pois"][0]["poi_id"]);
        assert_eq!(out.result["pois"][0]["type"], "npc");
        let out = invoke(&state, json!({"include_routes": true})).unwrap();
        assert!(!out.result["routes"].as_array().unwrap().is_empty());
    }

    #[test]
    fn zones_are_listed() {
        let mut state = demo();
        state.apply(&Effect::AddZones {
            zones: vec![Zone {
                zone_id: "zone_1_-2_0".into(),
                name: "Misty Vale".into(),
                description: "A misty vale.".into(),
                x: 1,
                y: -2,
                z: 0,
                tags: vec!["generated".into()],
                world_prompt: String::new(),
            }],
        });
        let out = ctx_run(&GetSiteMap, &state, &json!({})).unwrap();
        assert_eq!(
            out.result["zones"],
            json!([{"zone_id": "zone_1_-2_0", "name": "Misty Vale", "x": 1, "y": -2, "z": 0}])
        );
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = demo();
        for bad in [
            json!({"include_pois": "yes"}),
            json!({"include_routes": 1}),
            json!({"include_zones": false}),
        ] {
            let e = invoke(&state, bad.clone()).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{bad}"
            );
        }
    }
}
