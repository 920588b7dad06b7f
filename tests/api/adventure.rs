//! The offline game master plays the demo campaign's adventure from the
//! gate to the end of its quest, in English and in Chinese, over a
//! WebSocket, as a player would.

use crate::common::{Api, spawn_offline, turn};

/// The words a player of each language uses.
struct Words {
    look: &'static str,
    go: fn(&str) -> String,
    alcove: &'static str,
    talk_maren: &'static str,
    maren_says: &'static str,
    take_lantern: &'static str,
    route: [&'static str; 3],
    take_oil: &'static str,
    oil: &'static str,
    heart: &'static str,
    use_oil: &'static str,
    barred: &'static str,
    attack: &'static str,
    take_potion: &'static str,
    use_potions: [&'static str; 2],
    done: &'static str,
    unknown: (&'static str, &'static str),
}

const ENGLISH: Words = Words {
    look: "look around",
    go: |place| format!("go to {place}"),
    alcove: "Lamplighter's Alcove",
    talk_maren: "talk to Old Maren",
    maren_says: "Have you brought oil, or only questions?",
    take_lantern: "pick up the lamp",
    route: ["Hall of Wicks", "Tide Archive", "Drowned Market"],
    take_oil: "take the sealed lamp oil",
    oil: "Sealed Lamp Oil",
    heart: "Heart Lantern",
    use_oil: "use the oil",
    barred: "bars your way",
    attack: "attack the warden",
    take_potion: "grab the kelp potion",
    use_potions: ["use healing potion", "drink kelp potion"],
    done: "Quest complete: \"Oil for the Last Lamp\"",
    unknown: ("go to the moon", "I know of no place called \"the moon\""),
};

const CHINESE: Words = Words {
    look: "看看",
    go: |place| format!("去 {place}"),
    alcove: "点灯人小室",
    talk_maren: "和老玛伦说话",
    maren_says: "你是带来了灯油，还是只带来了问题？",
    take_lantern: "拿 绿玻璃灯",
    route: ["灯芯大厅", "潮汐档案馆", "溺水集市"],
    take_oil: "拿 密封灯油",
    oil: "密封灯油",
    heart: "心灯",
    use_oil: "使用 密封灯油",
    barred: "挡住了你的去路",
    attack: "攻击 守望者",
    take_potion: "拿 海藻药水",
    use_potions: ["使用 治疗药水", "使用 海藻药水"],
    done: "任务完成：“最后一盏灯的灯油”",
    unknown: ("去 月亮", "我不知道附近有叫“月亮”的地方"),
};

async fn play_the_demo(w: &Words) {
    let app = spawn_offline(|s| {
        s.chat_burst = 200;
        s.chat_per_minute = 1000;
    })
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;

    // Looking around names the place, what lies here and the ways on.
    let t = turn(&mut ws, w.look).await;
    assert!(
        t.called("move_options") && t.called("get_site_map"),
        "{:?}",
        t.tools
    );
    let gate = if w.look == "看看" {
        "灯笼门"
    } else {
        "Lantern Gate"
    };
    assert!(t.reply.starts_with(gate), "{}", t.reply);
    let (lantern, alcove) = if w.look == "看看" {
        ("绿玻璃灯", "点灯人小室")
    } else {
        ("Green-Glass Lamp", "Lamplighter's Alcove")
    };
    assert!(
        t.reply.contains(lantern) && t.reply.contains(alcove),
        "{}",
        t.reply
    );

    // An unknown place is said to be unknown.
    let t = turn(&mut ws, w.unknown.0).await;
    assert!(!t.called("move"));
    assert!(t.reply.contains(w.unknown.1), "{}", t.reply);

    // Items in the area can be taken.
    let t = turn(&mut ws, w.take_lantern).await;
    let added = t.results("add_inventory");
    assert_eq!(added.len(), 1, "{:?}", t.tools);
    assert_eq!(added[0]["added"][0]["slug"], "green_glass_lamp");
    assert!(t.reply.contains(lantern), "{}", t.reply);

    // Old Maren speaks from her profile.
    let t = turn(&mut ws, &(w.go)(w.alcove)).await;
    assert_eq!(t.results("move")[0]["area"]["area_id"], "area_002");
    assert!(t.reply.contains(w.alcove), "{}", t.reply);
    let t = turn(&mut ws, w.talk_maren).await;
    assert!(t.called("get_npc_profile"), "{:?}", t.tools);
    assert!(t.reply.contains(w.maren_says), "{}", t.reply);

    for place in w.route {
        let t = turn(&mut ws, &(w.go)(place)).await;
        assert!(t.called("move"), "{place}: {:?} {}", t.tools, t.reply);
        assert!(t.reply.contains(place), "{}", t.reply);
    }
    let t = turn(&mut ws, w.take_oil).await;
    assert_eq!(
        t.results("add_inventory")[0]["added"][0]["slug"],
        "sealed_lamp_oil"
    );
    assert!(t.reply.contains(w.oil), "{}", t.reply);
    let t = turn(&mut ws, w.take_potion).await;
    assert_eq!(
        t.results("add_inventory")[0]["added"][0]["slug"],
        "kelp_potion"
    );
    let t = turn(&mut ws, &(w.go)(w.heart)).await;
    assert_eq!(t.results("move")[0]["area"]["area_id"], "area_009");

    // The Warden bars the way until he is downed.
    let t = turn(&mut ws, w.use_oil).await;
    assert!(!t.called("update_inventory"), "{:?}", t.tools);
    assert!(t.reply.contains(w.barred), "{}", t.reply);

    let mut potions = w.use_potions.iter();
    let mut warden_down = false;
    for _ in 0..40 {
        let t = turn(&mut ws, w.attack).await;
        assert_eq!(t.results("roll_dice").len(), 2, "{}", t.reply);
        for hp in t.results("hp_delta") {
            if hp["character_id"] == "npc_003" && hp["downed"] == true {
                warden_down = true;
            }
            if hp["character_id"] == "pc_001" {
                assert!(hp["hp"].as_i64().unwrap() < hp["hp_before"].as_i64().unwrap());
                assert!(
                    !hp["downed"].as_bool().unwrap(),
                    "the hero fell: {}",
                    t.reply
                );
                if hp["hp"].as_i64().unwrap() <= 4 {
                    let potion = potions.next().expect("a potion left");
                    let healed = turn(&mut ws, potion).await;
                    let up = healed.results("hp_delta");
                    assert!(up[0]["hp"].as_i64() > hp["hp"].as_i64(), "{}", healed.reply);
                }
            }
        }
        if warden_down {
            break;
        }
    }
    assert!(warden_down, "the warden falls within 40 blows");

    // Now the oil can be poured: the quest is done.
    let t = turn(&mut ws, w.use_oil).await;
    let used = t.results("update_inventory");
    assert_eq!(used[0]["changes"][0]["slug"], "sealed_lamp_oil");
    assert_eq!(used[0]["changes"][0]["after"], 0);
    assert!(t.reply.contains(w.done), "{}", t.reply);

    let snap = app.snapshot(&s).await;
    let character = |id: &str| {
        snap["characters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["character_id"] == id)
            .unwrap()
    };
    let hero = character("pc_001");
    let slugs: Vec<&str> = hero["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["slug"].as_str().unwrap())
        .collect();
    assert!(slugs.contains(&"green_glass_lamp") && !slugs.contains(&"sealed_lamp_oil"));
    assert_eq!(character("npc_003")["hp"], 0);
}

#[actix_web::test]
async fn the_demo_adventure_plays_to_the_quests_end_in_english() {
    play_the_demo(&ENGLISH).await;
}

#[actix_web::test]
async fn the_demo_adventure_plays_to_the_quests_end_in_chinese() {
    play_the_demo(&CHINESE).await;
}
