//! The offline game master plays the demo campaign's adventure from the
//! gate to the end of its quest, in English and in Chinese, over a
//! WebSocket, as a player would. Each game is written down as it is played
//! (player line, then the game master's reply) in
//! `target/adventure-transcript-en.txt` and `target/adventure-transcript-zh.txt`.

use std::path::PathBuf;
use std::sync::Arc;

use questd::llm::OfflineGameMaster;
use serde_json::Value;

use crate::common::{Api, Turn, Ws, spawn_in, turn};

/// A game as it is played: each player line and the reply, written out
/// after every turn so that a game that fails midway is readable too.
pub(crate) struct Transcript {
    path: PathBuf,
    text: String,
}

impl Transcript {
    fn new(lang: &str) -> Self {
        Self::named(&format!("adventure-transcript-{lang}.txt"))
    }

    /// A transcript written to `file` in the crate's `target/`.
    pub(crate) fn named(file: &str) -> Self {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(file);
        Transcript {
            path,
            text: String::new(),
        }
    }

    pub(crate) fn add(&mut self, line: &str) {
        self.text.push_str(line);
        std::fs::write(&self.path, &self.text).expect("the transcript is written");
    }
}

/// One player and their story.
struct Player {
    ws: Ws,
    transcript: Transcript,
    chinese: bool,
}

impl Player {
    async fn turn(&mut self, text: &str) -> Turn {
        let t = turn(&mut self.ws, text).await;
        self.transcript.add(&format!("> {text}\n{}\n\n", t.reply));
        // The demo names everything in Chinese too: a Chinese story holds
        // no Latin letter (no English word, no id).
        if self.chinese {
            assert!(
                !t.reply.chars().any(|c| c.is_ascii_alphabetic()),
                "{text}: {}",
                t.reply
            );
        }
        t
    }
}

/// The words a player of each language uses, and what the game says.
struct Words {
    lang: &'static str,
    look: &'static str,
    gate: &'static str,
    lantern: &'static str,
    go: fn(&str) -> String,
    alcove: &'static str,
    talk_maren: &'static str,
    maren_says: &'static str,
    /// Where Maren says the oil is.
    maren_hint: &'static str,
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
    /// How the reply of an attack tells the hero's roll (followed by it).
    you_roll: &'static str,
    warden_falls: &'static str,
    hero_is_down: &'static str,
    done: &'static str,
    quests_done: &'static str,
    unknown: (&'static str, &'static str),
    /// How a place beyond the next steps is told: the way there.
    far: &'static str,
    /// Commands that read the game (ways on, sheet, map, records), each
    /// with a word its answer holds.
    readings: [(&'static str, &'static str); 4],
}

const ENGLISH: Words = Words {
    lang: "en",
    look: "look around",
    gate: "Lantern Gate",
    lantern: "Green-Glass Lamp",
    go: |place| format!("go to {place}"),
    alcove: "Lamplighter's Alcove",
    talk_maren: "talk to Old Maren",
    maren_says: "Have you brought oil, or only questions?",
    maren_hint: "under the collapsed stalls of the Drowned Market",
    // The gate is hung with lanterns; its item is a lamp, also called one.
    take_lantern: "pick up the lantern",
    route: ["Hall of Wicks", "Tide Archive", "Drowned Market"],
    take_oil: "take the sealed lamp oil",
    oil: "Sealed Lamp Oil",
    heart: "Heart Lantern",
    use_oil: "use the oil",
    barred: "bars your way",
    attack: "attack the warden",
    take_potion: "grab the kelp potion",
    use_potions: ["use healing potion", "drink kelp potion"],
    you_roll: "You roll ",
    warden_falls: "The Drowned Warden falls!",
    hero_is_down: "is down and cannot act",
    done: "Quest complete: \"Oil for the Last Lamp\"",
    quests_done: "Quests done: \"Oil for the Last Lamp\".",
    unknown: ("go to the moon", "I know of no place called \"the moon\""),
    far: "the way there goes through the Flooded Stair",
    readings: [
        ("where can I go", "the Flooded Stair"),
        ("status", "Healing Potion ×1"),
        ("map", "9 places"),
        ("search lantern", "The Heart Lantern"),
    ],
};

const CHINESE: Words = Words {
    lang: "zh",
    look: "看看",
    gate: "灯笼门",
    lantern: "绿玻璃灯",
    go: |place| format!("去 {place}"),
    alcove: "点灯人小室",
    talk_maren: "和老玛伦说话",
    maren_says: "你是带来了灯油，还是只带来了问题？",
    maren_hint: "卡在溺水集市倒塌的摊位下",
    take_lantern: "拿起灯笼",
    route: ["灯芯大厅", "潮汐档案馆", "溺水集市"],
    take_oil: "拿 密封灯油",
    oil: "密封灯油",
    heart: "心灯",
    use_oil: "使用 密封灯油",
    barred: "挡住了你的去路",
    attack: "攻击 守望者",
    take_potion: "拿 海藻药水",
    use_potions: ["使用 治疗药水", "使用 海藻药水"],
    you_roll: "你掷出 ",
    warden_falls: "溺亡守望者倒下了！",
    hero_is_down: "倒下了，无法行动",
    done: "任务完成：“最后一盏灯的灯油”",
    quests_done: "已完成的任务：“最后一盏灯的灯油”。",
    unknown: ("去 月亮", "我不知道附近有叫“月亮”的地方"),
    far: "得先经过淹没阶梯",
    readings: [
        ("我能去哪", "淹没阶梯"),
        ("状态", "治疗药水 ×1"),
        ("地图", "9 个地点"),
        ("搜索 灯笼", "无油之灯"),
    ],
};

/// The fight's rules as docs/protocol.md §9.3 states them: the hero's d20
/// hits on 6 or more for 4 + 2 × level (the hero is level 1), doubled on a
/// 20; a foe still standing hits back on 16 or more for its level (the
/// Warden is level 3).
const HERO_HITS_ON: i64 = 6;
const HERO_BLOW: i64 = 4 + 2;
const FOE_HITS_ON: i64 = 16;
const WARDEN_BLOW: i64 = 3;
const WARDEN_HP: i64 = 18;
const HERO_HP: i64 = 12;
/// What a potion gives back (§9.3).
const POTION_HEALS: i64 = 6;
/// The hero drinks a potion at or below this.
const DRINK_AT: i64 = 4;
/// Most exchanges of the fight. The hero lands a blow three times in four
/// and three blows down the Warden, so a fight this long without either
/// side falling is less likely than one in 10^50.
const MAX_EXCHANGES: usize = 100;

/// How a fight ended.
#[derive(Debug, PartialEq)]
enum Fight {
    WardenDown,
    HeroDownWithoutPotions,
}

/// Fights the Warden to the end, whatever the dice say, checking that every
/// exchange's HP changes are the ones its two rolls call for.
async fn fight(p: &mut Player, w: &Words) -> Fight {
    let mut potions = w.use_potions.iter();
    let (mut warden, mut hero) = (WARDEN_HP, HERO_HP);
    for _ in 0..MAX_EXCHANGES {
        let t = p.turn(w.attack).await;
        let rolls = t.results("roll_dice");
        assert_eq!(rolls.len(), 2, "{}", t.reply);
        let total = |r: &Value| {
            let n = r["total"].as_i64().unwrap();
            assert!((1..=20).contains(&n), "a d20: {r}");
            n
        };
        let (mine, theirs) = (total(rolls[0]), total(rolls[1]));
        let dealt = match mine {
            20 => HERO_BLOW * 2,
            n if n >= HERO_HITS_ON => HERO_BLOW,
            _ => 0,
        };
        let taken = if warden > dealt && theirs >= FOE_HITS_ON {
            WARDEN_BLOW
        } else {
            0
        };
        let blows: Vec<(&str, i64)> = [("npc_003", dealt), ("pc_001", taken)]
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect();
        let hp = t.results("hp_delta");
        let changed: Vec<(&str, i64)> = hp
            .iter()
            .map(|h| {
                (
                    h["character_id"].as_str().unwrap(),
                    h["hp_before"].as_i64().unwrap() - h["hp"].as_i64().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(&str, i64)> = blows
            .iter()
            .map(|&(id, n)| (id, n.min(if id == "pc_001" { hero } else { warden })))
            .collect();
        assert_eq!(changed, expected, "rolls {mine} and {theirs}: {}", t.reply);
        warden = (warden - dealt).max(0);
        hero = (hero - taken).max(0);
        for h in &hp {
            let now = if h["character_id"] == "pc_001" {
                hero
            } else {
                warden
            };
            assert_eq!(h["hp"], now, "{h}");
            assert_eq!(h["downed"], now == 0, "{h}");
        }
        assert!(
            t.reply.contains(&format!("{}{mine}", w.you_roll)),
            "{}",
            t.reply
        );
        if warden == 0 {
            assert!(t.reply.contains(w.warden_falls), "{}", t.reply);
            return Fight::WardenDown;
        }
        if hero <= DRINK_AT {
            match potions.next() {
                Some(potion) => {
                    let healed = p.turn(potion).await;
                    let up = healed.results("hp_delta");
                    assert_eq!(up.len(), 1, "{}", healed.reply);
                    assert_eq!(up[0]["hp_before"], hero, "{}", healed.reply);
                    hero = (hero + POTION_HEALS).min(HERO_HP);
                    assert_eq!(up[0]["hp"], hero, "{}", healed.reply);
                }
                None if hero == 0 => {
                    // Down with no potion left: the dice allow it. The hero
                    // can no longer fight or finish the quest.
                    let t = p.turn(w.attack).await;
                    assert!(!t.called("roll_dice"), "{:?}", t.tools);
                    assert!(t.reply.contains(w.hero_is_down), "{}", t.reply);
                    let t = p.turn(w.use_oil).await;
                    assert!(!t.called("update_inventory"), "{:?}", t.tools);
                    assert!(t.reply.contains(w.hero_is_down), "{}", t.reply);
                    return Fight::HeroDownWithoutPotions;
                }
                None => {}
            }
        }
    }
    panic!("neither side fell in {MAX_EXCHANGES} exchanges");
}

async fn play_the_demo(w: &Words) {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let settings = |s: &mut questd::Settings| {
        s.chat_burst = 400;
        s.chat_per_minute = 2000;
    };
    let app = spawn_in(
        dir.clone(),
        settings,
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let s = app.demo().await;
    let (ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let mut p = Player {
        ws,
        transcript: Transcript::new(w.lang),
        chinese: w.lang == "zh",
    };

    // Looking around names the place, what lies here and the ways on.
    let t = p.turn(w.look).await;
    assert!(
        t.called("move_options") && t.called("get_site_map"),
        "{:?}",
        t.tools
    );
    assert!(t.reply.starts_with(w.gate), "{}", t.reply);
    assert!(
        t.reply.contains(w.lantern) && t.reply.contains(w.alcove),
        "{}",
        t.reply
    );

    // What the game reads out is in the player's language too.
    for (command, says) in w.readings {
        let t = p.turn(command).await;
        assert!(t.reply.contains(says), "{command}: {}", t.reply);
    }

    // An unknown place is said to be unknown.
    let t = p.turn(w.unknown.0).await;
    assert!(!t.called("move"));
    assert!(t.reply.contains(w.unknown.1), "{}", t.reply);

    // A place on the map's far side (a click on it) is named, with the
    // way there, and nobody moves.
    let t = p.turn(&(w.go)(w.heart)).await;
    assert!(!t.called("move"), "{:?}", t.tools);
    assert!(
        t.reply.contains(w.heart) && t.reply.contains(w.far),
        "{}",
        t.reply
    );

    // Items in the area can be taken, called as the player calls them.
    let t = p.turn(w.take_lantern).await;
    let added = t.results("add_inventory");
    assert_eq!(added.len(), 1, "{:?} {}", t.tools, t.reply);
    assert_eq!(added[0]["added"][0]["slug"], "green_glass_lamp");
    assert!(t.reply.contains(w.lantern), "{}", t.reply);

    // Old Maren speaks from her profile, and says where the oil is.
    let t = p.turn(&(w.go)(w.alcove)).await;
    assert_eq!(t.results("move")[0]["area"]["area_id"], "area_002");
    assert!(t.reply.contains(w.alcove), "{}", t.reply);
    let t = p.turn(w.talk_maren).await;
    assert!(t.called("get_npc_profile"), "{:?}", t.tools);
    assert!(t.reply.contains(w.maren_says), "{}", t.reply);
    assert!(t.reply.contains(w.maren_hint), "{}", t.reply);

    for place in w.route {
        let t = p.turn(&(w.go)(place)).await;
        assert!(t.called("move"), "{place}: {:?} {}", t.tools, t.reply);
        assert!(t.reply.contains(place), "{}", t.reply);
    }
    let t = p.turn(w.take_oil).await;
    assert_eq!(
        t.results("add_inventory")[0]["added"][0]["slug"],
        "sealed_lamp_oil"
    );
    assert!(t.reply.contains(w.oil), "{}", t.reply);
    let t = p.turn(w.take_potion).await;
    assert_eq!(
        t.results("add_inventory")[0]["added"][0]["slug"],
        "kelp_potion"
    );
    let t = p.turn(&(w.go)(w.heart)).await;
    assert_eq!(t.results("move")[0]["area"]["area_id"], "area_009");

    // The Warden bars the way until he is downed.
    let t = p.turn(w.use_oil).await;
    assert!(!t.called("update_inventory"), "{:?}", t.tools);
    assert!(t.reply.contains(w.barred), "{}", t.reply);

    if fight(&mut p, w).await == Fight::HeroDownWithoutPotions {
        return;
    }

    // Now the oil can be poured: the quest is done, and recorded.
    let t = p.turn(w.use_oil).await;
    let used = t.results("update_inventory");
    assert_eq!(used[0]["changes"][0]["slug"], "sealed_lamp_oil");
    assert_eq!(used[0]["changes"][0]["after"], 0);
    let record = t.results("create_draft_content");
    assert_eq!(record.len(), 1, "{:?}", t.tools);
    assert_eq!(record[0]["entry"]["content_type"], "quest_done");
    assert_eq!(record[0]["entry"]["title"], "quest_last_oil");
    assert!(t.reply.contains(w.done), "{}", t.reply);

    let snap = app.snapshot(&s).await;
    let character = |id: &str| {
        snap["characters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["character_id"] == id)
            .unwrap()
            .clone()
    };
    let slugs = |hero: &Value| -> Vec<String> {
        hero["inventory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["slug"].as_str().unwrap().to_owned())
            .collect()
    };
    let carried = slugs(&character("pc_001"));
    assert!(
        carried.contains(&"green_glass_lamp".to_owned()),
        "{carried:?}"
    );
    assert!(
        !carried.contains(&"sealed_lamp_oil".to_owned()),
        "{carried:?}"
    );
    assert_eq!(character("npc_003")["hp"], 0);

    // The server restarts: the quest is still done, and looking around says
    // so; the oil, used up, is not back at the market to finish it again.
    let Player {
        ws,
        mut transcript,
        chinese,
    } = p;
    drop(ws);
    app.stop().await;
    drop(app);
    transcript.add("(the server restarts)\n\n");
    let app = spawn_in(dir, settings, Arc::new(OfflineGameMaster::default())).await;
    let (ws, _) = app
        .connect_once_ready(&s.session_id, &s.player_token, None)
        .await;
    let mut p = Player {
        ws,
        transcript,
        chinese,
    };
    let t = p.turn(w.look).await;
    assert!(
        t.reply.starts_with(w.heart) && t.reply.contains(w.quests_done),
        "{}",
        t.reply
    );
    let market = w.route[2];
    p.turn(&(w.go)(market)).await;
    let t = p.turn(w.take_oil).await;
    assert!(!t.called("add_inventory"), "{:?} {}", t.tools, t.reply);
    p.turn(&(w.go)(w.heart)).await;
    let t = p.turn(w.use_oil).await;
    assert!(!t.reply.contains(w.done), "{}", t.reply);
    assert!(
        !t.called("update_inventory") && !t.called("create_draft_content"),
        "{:?}",
        t.tools
    );
    let carried = slugs(
        app.snapshot(&s).await["characters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["character_id"] == "pc_001")
            .unwrap(),
    );
    assert!(
        !carried.contains(&"sealed_lamp_oil".to_owned()),
        "{carried:?}"
    );
}

#[actix_web::test]
async fn the_demo_adventure_plays_to_the_quests_end_in_english() {
    play_the_demo(&ENGLISH).await;
}

#[actix_web::test]
async fn the_demo_adventure_plays_to_the_quests_end_in_chinese() {
    play_the_demo(&CHINESE).await;
}
