//! Places the offline game master makes keep the player's words and speak
//! the player's language: `explore` and `scout` in English and in Chinese
//! over a WebSocket, and a new Chinese place is walked to by its name.

use serde_json::Value;

use crate::common::{Api, Turn, Ws, spawn_offline, turn};

/// The areas a turn's `map_generate` made.
fn new_areas(t: &Turn) -> Vec<Value> {
    let made = t.results("map_generate");
    assert_eq!(made.len(), 1, "{:?}", t.tools);
    made[0]["areas"].as_array().unwrap().clone()
}

/// The zone a turn's `generate_zone` made.
fn new_zone(t: &Turn) -> Value {
    let made = t.results("generate_zone");
    assert_eq!(made.len(), 1, "{:?}", t.tools);
    made[0]["zones"][0].clone()
}

fn text(v: &Value, field: &str) -> String {
    v[field].as_str().unwrap().to_owned()
}

fn has_ascii_letter(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_alphabetic())
}

/// A demo session and a player's connection to it.
async fn playing() -> (crate::common::TestApp, Ws) {
    let app = spawn_offline(|_| {}).await;
    let s = app.demo().await;
    let (ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    (app, ws)
}

#[actix_web::test]
async fn english_places_keep_the_players_words() {
    let (_app, mut ws) = playing().await;

    let t = turn(&mut ws, "scout a misty forest of lanterns").await;
    let zone = new_zone(&t);
    let name = text(&zone, "name");
    assert!(name.starts_with("Misty Forest of Lanterns, "), "{name}");
    assert!(
        text(&zone, "description").contains("misty forest of lanterns"),
        "{zone}"
    );
    assert!(t.reply.contains(&name), "{}", t.reply);

    let t = turn(&mut ws, "explore crystal caves").await;
    let areas = new_areas(&t);
    assert_eq!(areas.len(), 6);
    let mut names: Vec<String> = areas.iter().map(|a| text(a, "name")).collect();
    for (area, name) in areas.iter().zip(&names) {
        assert!(name.contains("Crystal Caves"), "{name}");
        let description = text(area, "description");
        assert!(description.contains("crystal caves"), "{description}");
        // Grouped under the theme, with a short name the map shows, and
        // told the same way: the theme once, each place by its short name.
        assert_eq!(area["group"], "Crystal Caves", "{area}");
        let short = text(area, "short_name");
        assert_eq!(*name, format!("{short} of the Crystal Caves"), "{area}");
        assert!(t.reply.contains(&format!("the {short}")), "{}", t.reply);
    }
    assert!(
        t.reply.contains("into the Crystal Caves:")
            && t.reply.matches("Crystal Caves").count() == 1,
        "{}",
        t.reply
    );
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 6, "no two share a name: {names:?}");

    // A new area is reached by its name, and the next by its short name.
    let (id, name) = (text(&areas[0], "area_id"), text(&areas[0], "name"));
    let t = turn(&mut ws, &format!("go to {name}")).await;
    assert_eq!(t.results("move")[0]["area"]["area_id"], id.as_str());
    assert!(t.reply.contains(&name), "{}", t.reply);
    let next = t.results("move")[0]["reachable_area_ids"]
        .as_array()
        .and_then(|ids| {
            let ids: Vec<&str> = ids.iter().filter_map(Value::as_str).collect();
            areas
                .iter()
                .find(|a| ids.contains(&text(a, "area_id").as_str()))
        })
        .expect("a new area joins another new one");
    let t = turn(&mut ws, &format!("go to {}", text(next, "short_name"))).await;
    assert_eq!(
        t.results("move")[0]["area"]["area_id"],
        text(next, "area_id").as_str()
    );
}

#[actix_web::test]
async fn chinese_places_are_named_in_chinese_and_walked_to_by_name() {
    let (_app, mut ws) = playing().await;

    let t = turn(&mut ws, "侦察 迷雾沼泽").await;
    let zone = new_zone(&t);
    let (name, description) = (text(&zone, "name"), text(&zone, "description"));
    assert!(
        name.contains("迷雾沼泽") && !has_ascii_letter(&name),
        "{name}"
    );
    assert!(
        description.contains("迷雾沼泽") && !has_ascii_letter(&description),
        "{description}"
    );
    assert!(t.reply.contains(&name), "{}", t.reply);

    // No theme: still Chinese, because the player writes Chinese.
    let t = turn(&mut ws, "探索").await;
    let bare = new_areas(&t);
    for area in &bare {
        for field in ["name", "description"] {
            let s = text(area, field);
            assert!(!s.is_empty() && !has_ascii_letter(&s), "{field}: {s}");
        }
        // A name without a theme is short already: no group.
        assert!(area.get("group").is_none() && area.get("short_name").is_none());
        assert!(t.reply.contains(&text(area, "name")), "{}", t.reply);
    }

    let t = turn(&mut ws, "探索 洞穴").await;
    for area in new_areas(&t) {
        let name = text(&area, "name");
        assert!(name.contains("洞穴") && !has_ascii_letter(&name), "{name}");
        assert_eq!(area["group"], "洞穴", "{area}");
        let short = text(&area, "short_name");
        assert_eq!(short.chars().count(), 4, "{area}");
        assert_eq!(name.replacen("洞穴", "", 1), short, "{area}");
        assert!(t.reply.contains(&short), "{}", t.reply);
    }
    assert!(t.reply.contains("通向洞穴："), "{}", t.reply);

    // The first area of the bare call joins the one the player stands in.
    let (id, name) = (text(&bare[0], "area_id"), text(&bare[0], "name"));
    let t = turn(&mut ws, &format!("去 {name}")).await;
    assert_eq!(t.results("move")[0]["area"]["area_id"], id.as_str());
    assert!(t.reply.contains(&name), "{}", t.reply);
    assert!(!has_ascii_letter(&t.reply), "{}", t.reply);
}
