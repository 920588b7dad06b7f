//! Deterministic map generation for `map_generate`.
//!
//! The same seed, theme, size and starting map always give the same areas, so
//! a generated map can be reproduced; the journal still stores the areas
//! themselves, never the seed alone.

use std::collections::BTreeSet;

use super::names::{self, Language, Phrase, TakenNames, article, pick_fresh};
use super::rng::{SplitMix64, text_seed};
use super::state::{Area, AreaId, MAX_LINKS_PER_AREA};

/// Default number of areas generated.
pub const DEFAULT_SIZE: usize = 6;
/// Most areas generated in one call.
pub const MAX_SIZE: usize = 30;
/// Distance between neighbouring generated areas on the layout.
const STEP: i64 = 110;

// A generated area links to its parent, at most one extra earlier area, the
// existing area it hangs off (the first one only) and at most once to each
// later area of the same call: never more than MAX_SIZE + 2 links, so one
// call can never pass the per-area cap on its new areas.
const _: () = assert!(MAX_SIZE + 2 <= MAX_LINKS_PER_AREA);

/// Why no map could be generated. Only a map whose numbers sit at the very
/// edge of their ranges (a hand-made campaign or save) can give these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The layout would pass the edge of the `i64` coordinates.
    #[error("there is no room left on the layout near ({x}, {y}); generate from another area")]
    NoRoom { x: i64, y: i64 },
    /// Existing ids already use the highest area number.
    #[error("no fresh area id is left: an area id already uses the highest number")]
    NoFreshIds,
}

/// The words of generated areas in one language.
struct Words {
    places: &'static [&'static str],
    moods: &'static [&'static str],
    details: &'static [&'static str],
}

const ENGLISH: Words = Words {
    places: &[
        "Hall", "Passage", "Grotto", "Chamber", "Vault", "Stair", "Gallery", "Well", "Shrine",
        "Cistern", "Bridge", "Crypt", "Garden", "Archive", "Landing",
    ],
    moods: &[
        "Dripping",
        "Silent",
        "Moonlit",
        "Broken",
        "Whispering",
        "Flooded",
        "Gilded",
        "Hollow",
        "Overgrown",
        "Ashen",
        "Echoing",
        "Forgotten",
    ],
    details: &[
        "Water drips from the ceiling into shallow pools.",
        "Old carvings cover the walls, worn smooth by time.",
        "A cold draught carries the smell of wet stone.",
        "Roots have split the flagstones apart.",
        "Faint light glimmers somewhere ahead.",
        "Rusted chains hang from iron rings.",
        "Dust lies thick and undisturbed.",
        "The air hums with a low, distant sound.",
    ],
};

const CHINESE: Words = Words {
    places: &[
        "大厅", "通道", "洞窟", "石室", "穹室", "阶梯", "回廊", "古井", "神龛", "水窖", "石桥",
        "墓室", "花园", "书库", "平台",
    ],
    moods: &[
        "幽暗", "寂静", "潮湿", "破败", "荒废", "阴冷", "古老", "空旷", "狭窄", "斑驳", "鎏金",
        "幽深",
    ],
    details: &[
        "水从顶上滴落，积成浅浅的水洼。",
        "墙上满是古老的刻纹，已被岁月磨平。",
        "一阵冷风吹过，带着湿石的气味。",
        "树根撑裂了地上的石板。",
        "前方某处闪着微光。",
        "锈蚀的锁链挂在铁环上。",
        "灰尘积得很厚，无人惊扰。",
        "空气中回荡着低沉而遥远的嗡鸣。",
    ],
};

/// What to generate and where to attach it.
pub struct MapRequest<'a> {
    /// The area the new ones connect to; `None` starts a new root layer
    /// that is not joined to the existing map.
    pub from: Option<&'a Area>,
    /// Every area already on the map (for fresh ids and free positions).
    pub existing: &'a [Area],
    pub theme: &'a str,
    /// The language of the names and descriptions.
    pub language: Language,
    pub size: usize,
    pub seed: u64,
}

/// New areas plus the links that join them to existing areas. Each new area's
/// `reachable_area_ids` is complete; `links` holds every (existing, new) pair
/// so the existing side gets its way back.
pub struct GeneratedMap {
    pub areas: Vec<Area>,
    pub links: Vec<(AreaId, AreaId)>,
}

/// Generates `req.size` (clamped to `1..=MAX_SIZE`) areas. Every
/// coordinate and id number is computed with checked arithmetic: where the
/// existing map leaves no room, the answer is an error, never a wrapped
/// number or a panic.
pub fn generate(req: &MapRequest<'_>) -> Result<GeneratedMap, MapError> {
    let mut rng = SplitMix64::new(req.seed ^ text_seed(req.theme));
    let size = req.size.clamp(1, MAX_SIZE);
    let next_number = req
        .existing
        .iter()
        .filter_map(|a| {
            a.area_id
                .as_str()
                .strip_prefix("area_")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0)
        .checked_add(1)
        .ok_or(MapError::NoFreshIds)?;
    // The last number used must fit too, so every id below is fresh.
    next_number
        .checked_add(size as u64)
        .ok_or(MapError::NoFreshIds)?;
    let mut taken: BTreeSet<(i64, i64)> = req.existing.iter().map(|a| (a.x, a.y)).collect();
    let tag = req.theme.trim().to_lowercase();
    let phrase = Phrase::of(req.theme);
    // Places made on a theme share it as their group's label.
    let group = phrase
        .as_ref()
        .map_or_else(String::new, |p| p.group(req.language));
    // A themed place's short name is one of its names too.
    let mut names = TakenNames::new(
        req.existing
            .iter()
            .flat_map(|a| [a.name.as_str(), a.short_name.as_str()])
            .filter(|name| !name.is_empty()),
    );
    // Words draw from a generator of their own, so the layout of a seed
    // does not depend on how many tries a fresh name took.
    let mut words = SplitMix64::new(req.seed ^ text_seed(req.theme) ^ NAMES_SALT);

    // A root layer starts below everything already drawn.
    let origin = match req.from {
        Some(f) => (f.x, f.y),
        None => match req.existing.iter().map(|a| a.y).max() {
            None => (0, 0),
            Some(y) => (
                0,
                y.checked_add(STEP * 3)
                    .ok_or(MapError::NoRoom { x: 0, y })?,
            ),
        },
    };
    let z = req.from.map_or(0, |f| f.z);
    let mut areas: Vec<Area> = Vec::with_capacity(size);
    let mut edges: Vec<(usize, Option<usize>)> = Vec::new();
    for i in 0..size {
        // The first area hangs off `from`; each later one off an earlier new
        // area, with an occasional extra link so the map has loops.
        let parent = if i == 0 {
            None
        } else {
            Some(rng.below(i as u64) as usize)
        };
        edges.push((i, parent));
        if i >= 3 && rng.below(4) == 0 {
            let extra = rng.below(i as u64) as usize;
            if Some(extra) != parent {
                edges.push((i, Some(extra)));
            }
        }
        let (px, py) = match parent {
            None => origin,
            Some(p) => (areas[p].x, areas[p].y),
        };
        let (x, y) =
            free_spot(&mut rng, &mut taken, px, py).ok_or(MapError::NoRoom { x: px, y: py })?;
        // Below next_number + size, checked above.
        let id = AreaId::from(format!("area_{:03}", next_number + i as u64));
        let text = area_text(&mut words, phrase.as_ref(), req.language, &mut names);
        areas.push(Area {
            area_id: id,
            name: text.name,
            description: text.description,
            reachable_area_ids: Vec::new(),
            x,
            y,
            z,
            tags: if tag.is_empty() {
                vec!["generated".into()]
            } else {
                vec!["generated".into(), tag.clone()]
            },
            group: group.clone(),
            short_name: text.short_name,
        });
    }

    // Connections are rebuilt from the edge list so both ends always agree.
    let mut links = Vec::new();
    for (child, parent) in edges {
        let child_id = areas[child].area_id.clone();
        match parent {
            None => {
                if let Some(from) = req.from {
                    areas[child].reachable_area_ids.push(from.area_id.clone());
                    links.push((from.area_id.clone(), child_id));
                }
            }
            Some(p) => {
                let parent_id = areas[p].area_id.clone();
                if !areas[child].reachable_area_ids.contains(&parent_id) {
                    areas[child].reachable_area_ids.push(parent_id);
                }
                if !areas[p].reachable_area_ids.contains(&child_id) {
                    areas[p].reachable_area_ids.push(child_id);
                }
            }
        }
    }
    Ok(GeneratedMap { areas, links })
}

/// A free layout spot near `(px, py)`, ring by ring; spots whose
/// coordinates would overflow are skipped. `None` only at the very edge of
/// the `i64` range.
fn free_spot(
    rng: &mut SplitMix64,
    taken: &mut BTreeSet<(i64, i64)>,
    px: i64,
    py: i64,
) -> Option<(i64, i64)> {
    const DIRS: [(i64, i64); 8] = [
        (1, 0),
        (0, 1),
        (-1, 0),
        (0, -1),
        (1, 1),
        (-1, 1),
        (1, -1),
        (-1, -1),
    ];
    let start = rng.below(DIRS.len() as u64) as usize;
    for ring in 1..=8 {
        for k in 0..DIRS.len() {
            let (dx, dy) = DIRS[(start + k) % DIRS.len()];
            // dx, dy are -1..=1 and ring at most 8, so only the additions
            // can overflow.
            let spot = (
                px.checked_add(dx * STEP * ring),
                py.checked_add(dy * STEP * ring),
            );
            if let (Some(x), Some(y)) = spot
                && taken.insert((x, y))
            {
                return Some((x, y));
            }
        }
    }
    // Crowded: fall back to a spot offset by a unique amount.
    let offset = i64::try_from(taken.len()).ok()?.checked_add(STEP * 9)?;
    let spot = (px.checked_add(offset)?, py);
    taken.insert(spot);
    Some(spot)
}

/// Mixed into the seed of the words' generator.
const NAMES_SALT: u64 = 0x6e61_6d65_7321;

/// The words of one new area.
struct AreaText {
    /// Unique on the map: the short name around the theme's words.
    name: String,
    /// The mood and the kind of place alone ("Silent Gallery", "幽暗大厅"),
    /// numbered as `name` is when that was; empty without a theme, when
    /// `name` is already short.
    short_name: String,
    description: String,
}

/// The name and description of one new area: a mood and a kind of place
/// that do not repeat the player's words, around those words, in the
/// map's language; a name no area has yet.
fn area_text(
    rng: &mut SplitMix64,
    phrase: Option<&Phrase>,
    language: Language,
    taken: &mut TakenNames,
) -> AreaText {
    let words = match language {
        Language::En => &ENGLISH,
        Language::Zh => &CHINESE,
    };
    // A themed place is also called by its short name: both must be free.
    let (names, (mood, place)) = taken.claim_all(|| {
        let mood = *pick_fresh(rng, words.moods, |w| names::repeats(phrase, w));
        let place = *pick_fresh(rng, words.places, |w| names::repeats(phrase, w));
        let name = match (language, phrase) {
            (Language::En, None) => format!("{mood} {place}"),
            // "Silent Ice Gallery", but "Silent Gallery of the Crystal Caves".
            (Language::En, Some(p)) if p.is_modifier() => format!("{mood} {} {place}", p.title()),
            (Language::En, Some(p)) => format!("{mood} {place} of the {}", p.title()),
            (Language::Zh, None) => format!("{mood}{place}"),
            (Language::Zh, Some(p)) if p.is_cjk() => format!("{mood}{}{place}", p.text()),
            (Language::Zh, Some(p)) => format!("{}·{mood}{place}", p.text()),
        };
        let short = match (language, phrase) {
            (_, None) => None,
            (Language::En, Some(_)) => Some(format!("{mood} {place}")),
            (Language::Zh, Some(_)) => Some(format!("{mood}{place}")),
        };
        (std::iter::once(name).chain(short).collect(), (mood, place))
    });
    // A name numbered because every draw was taken numbers its short name
    // alike, so two places of a group are told apart.
    let mut names = names.into_iter();
    let name = names.next().unwrap_or_default();
    let short_name = names.next().unwrap_or_default();
    let detail = rng.pick(words.details);
    let (a, m, pl) = (article(mood), mood.to_lowercase(), place.to_lowercase());
    let description = match (language, phrase) {
        (Language::En, None) => format!("{a} {m} {pl} shaped by time. {detail}"),
        (Language::En, Some(p)) if p.is_modifier() => {
            format!("{a} {m} {} {pl}. {detail}", p.text())
        }
        (Language::En, Some(p)) => format!("{a} {m} {pl} deep in the {}. {detail}", p.text()),
        (Language::Zh, None) => format!("这是一处{mood}的{place}，早已被岁月侵蚀。{detail}"),
        (Language::Zh, Some(p)) => format!("这是{}中一处{mood}的{place}。{detail}", p.in_chinese()),
    };
    AreaText {
        name,
        short_name,
        description,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Area {
        Area {
            area_id: "area_001".into(),
            name: "Gate".into(),
            description: String::new(),
            reachable_area_ids: vec![],
            x: 0,
            y: 0,
            z: 0,
            tags: vec![],
            group: String::new(),
            short_name: String::new(),
        }
    }

    fn gen_with(seed: u64, size: usize) -> GeneratedMap {
        let from = start();
        let existing = [from.clone()];
        generate(&MapRequest {
            from: Some(&from),
            existing: &existing,
            theme: "crystal caves",
            language: Language::En,
            size,
            seed,
        })
        .expect("room to generate")
    }

    #[test]
    fn descriptions_take_a_or_an_by_the_first_sound() {
        for seed in 0..40 {
            for area in gen_with(seed, 6).areas {
                let d = area.description.to_lowercase();
                let vowel = |s: &str| s.starts_with(['a', 'e', 'i', 'o', 'u']);
                let (article, rest) = d.split_once(' ').unwrap();
                assert_eq!(article == "an", vowel(rest), "{}", area.description);
            }
        }
    }

    #[test]
    fn same_seed_same_map() {
        let (a, b) = (gen_with(42, 8), gen_with(42, 8));
        assert_eq!(a.areas, b.areas);
        assert_eq!(a.links, b.links);
        assert_ne!(gen_with(43, 8).areas, a.areas);
    }

    #[test]
    fn size_is_clamped_and_ids_are_fresh() {
        assert_eq!(gen_with(1, 0).areas.len(), 1);
        assert_eq!(gen_with(1, 100).areas.len(), MAX_SIZE);
        let map = gen_with(1, 6);
        assert_eq!(map.areas[0].area_id.as_str(), "area_002");
        let positions: BTreeSet<_> = map.areas.iter().map(|a| (a.x, a.y)).collect();
        assert_eq!(positions.len(), 6, "no two areas share a spot");
    }

    #[test]
    fn a_root_layer_joins_nothing() {
        let existing = [start()];
        let map = generate(&MapRequest {
            from: None,
            existing: &existing,
            theme: "sky",
            language: Language::En,
            size: 4,
            seed: 3,
        })
        .unwrap();
        assert!(map.links.is_empty());
        assert!(
            map.areas
                .iter()
                .all(|a| !a.reachable_area_ids.contains(&"area_001".into()))
        );
        assert!(
            map.areas.iter().all(|a| a.y > 0),
            "placed below the existing map"
        );
    }

    #[test]
    fn links_are_symmetric_and_everything_is_reachable() {
        let map = gen_with(9, 12);
        for area in &map.areas {
            for n in &area.reachable_area_ids {
                if let Some(other) = map.areas.iter().find(|a| &a.area_id == n) {
                    assert!(other.reachable_area_ids.contains(&area.area_id));
                }
            }
        }
        assert_eq!(map.links, vec![("area_001".into(), "area_002".into())]);
        // Walk from the first new area: every new area is reached.
        let mut seen = BTreeSet::from([map.areas[0].area_id.clone()]);
        let mut stack = vec![map.areas[0].area_id.clone()];
        while let Some(id) = stack.pop() {
            let area = map.areas.iter().find(|a| a.area_id == id).unwrap();
            for n in &area.reachable_area_ids {
                if map.areas.iter().any(|a| &a.area_id == n) && seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        assert_eq!(seen.len(), map.areas.len());
    }

    /// Maps of `size` areas grown one call after another from the start,
    /// each call seeing every area before it.
    fn grown(theme: &str, language: Language, calls: u64, size: usize) -> Vec<Area> {
        let from = start();
        let mut all = vec![from.clone()];
        for seed in 0..calls {
            let map = generate(&MapRequest {
                from: Some(&from),
                existing: &all,
                theme,
                language,
                size,
                seed,
            })
            .unwrap();
            all.extend(map.areas);
        }
        all.remove(0);
        all
    }

    #[test]
    fn english_names_keep_the_theme_and_say_no_word_twice() {
        let cases = [
            (
                "crystal caves",
                " of the Crystal Caves",
                "deep in the crystal caves.",
            ),
            (
                "whispering reeds",
                "of the Whispering Reeds",
                "deep in the whispering reeds.",
            ),
            (
                "a misty forest of lanterns",
                "of the Misty Forest of Lanterns",
                "deep in the misty forest of lanterns.",
            ),
            ("ice", "Ice", " ice "),
            (
                "Hollow hills",
                "of the Hollow Hills",
                "deep in the Hollow hills.",
            ),
            ("gallery", " Gallery ", " gallery "),
        ];
        for (theme, in_name, in_description) in cases {
            for seed in 0..30 {
                let map = generate(&MapRequest {
                    from: Some(&start()),
                    existing: &[start()],
                    theme,
                    language: Language::of_text(theme),
                    size: 6,
                    seed,
                })
                .unwrap();
                for a in &map.areas {
                    assert!(a.name.contains(in_name), "{theme}: {}", a.name);
                    assert!(a.description.contains(in_description), "{}", a.description);
                    assert_eq!(names::doubled_word(&a.name), None, "{}", a.name);
                    let first = a.description.split('.').next().unwrap();
                    assert_eq!(names::doubled_word(first), None, "{}", a.description);
                    // At most a mood, a place and "of the" around the words.
                    assert!(
                        a.name.split(' ').count() <= 4 + names::MAX_PHRASE_WORDS,
                        "{}",
                        a.name
                    );
                }
            }
        }
    }

    #[test]
    fn a_long_theme_gives_a_short_name() {
        let theme = "the great misty forest of glowing lanterns where the old kings sleep";
        for a in gen_themed(theme, Language::En).areas {
            assert!(a.name.ends_with(" of the Great Misty Forest"), "{}", a.name);
        }
    }

    fn gen_themed(theme: &str, language: Language) -> GeneratedMap {
        generate(&MapRequest {
            from: Some(&start()),
            existing: &[start()],
            theme,
            language,
            size: 6,
            seed: 7,
        })
        .unwrap()
    }

    #[test]
    fn chinese_themes_give_chinese_areas() {
        let ascii_letter = |s: &str| s.chars().any(|c| c.is_ascii_alphabetic());
        for theme in ["洞穴", "迷雾沼泽", "幽暗古井", "", "  "] {
            for seed in 0..30 {
                let map = generate(&MapRequest {
                    from: Some(&start()),
                    existing: &[start()],
                    theme,
                    language: Language::Zh,
                    size: 6,
                    seed,
                })
                .unwrap();
                for a in &map.areas {
                    let (name, d) = (&a.name, &a.description);
                    assert!(!ascii_letter(name) && !ascii_letter(d), "{name}: {d}");
                    assert!(d.ends_with('。'), "{d}");
                    if theme.trim().is_empty() {
                        assert!(d.starts_with("这是一处"), "{d}");
                    } else {
                        assert!(names::adds_fresh_chinese(name, theme), "{name}");
                        assert!(d.starts_with(&format!("这是{theme}中一处")), "{d}");
                    }
                }
            }
        }
        // Told to write Chinese, an English theme is kept and quoted.
        for a in gen_themed("crystal caves", Language::Zh).areas {
            assert!(a.name.starts_with("crystal caves·"), "{}", a.name);
            assert!(
                a.description.starts_with("这是“crystal caves”中一处"),
                "{}",
                a.description
            );
        }
    }

    #[test]
    fn themed_places_are_grouped_under_the_theme_with_short_names() {
        // (theme, language, group, how the full name is made of the short one)
        type Full = fn(&str) -> String;
        let cases: [(&str, Language, &str, Full); 5] = [
            ("crystal caves", Language::En, "Crystal Caves", |s| {
                format!("{s} of the Crystal Caves")
            }),
            ("ice", Language::En, "Ice", |s| {
                let (mood, place) = s.split_once(' ').unwrap();
                format!("{mood} Ice {place}")
            }),
            ("洞穴", Language::Zh, "洞穴", |s| {
                let mid = s.char_indices().nth(2).unwrap().0;
                format!("{}洞穴{}", &s[..mid], &s[mid..])
            }),
            (
                "一片迷雾沼泽，到处是灯笼",
                Language::Zh,
                "迷雾沼泽",
                |s| {
                    let mid = s.char_indices().nth(2).unwrap().0;
                    format!("{}迷雾沼泽{}", &s[..mid], &s[mid..])
                },
            ),
            ("crystal caves", Language::Zh, "crystal caves", |s| {
                format!("crystal caves·{s}")
            }),
        ];
        for (theme, language, group, full) in cases {
            for seed in 0..20 {
                let map = generate(&MapRequest {
                    from: Some(&start()),
                    existing: &[start()],
                    theme,
                    language,
                    size: 6,
                    seed,
                })
                .unwrap();
                for a in &map.areas {
                    assert_eq!(a.group, group, "{theme}: {}", a.name);
                    assert_eq!(a.name, full(&a.short_name), "{theme}: {a:?}");
                    // A mood and a kind of place, without the theme's words.
                    let phrase = Phrase::of(theme).unwrap();
                    match language {
                        Language::En => {
                            assert_eq!(a.short_name.split(' ').count(), 2, "{a:?}");
                            assert!(!phrase.repeats(&a.short_name), "{a:?}");
                        }
                        Language::Zh => {
                            assert_eq!(a.short_name.chars().count(), 4, "{a:?}");
                            assert!(!a.short_name.chars().any(|c| c.is_ascii()), "{a:?}");
                        }
                    }
                }
            }
        }
        // Without a theme the name is short already: no group.
        for language in [Language::En, Language::Zh] {
            for a in gen_themed("  ", language).areas {
                assert!(a.group.is_empty() && a.short_name.is_empty(), "{a:?}");
            }
        }
        // On the wire, only when there is a group.
        let area = &gen_themed("crystal caves", Language::En).areas[0];
        let json = serde_json::to_value(area).unwrap();
        assert_eq!(json["group"], "Crystal Caves");
        assert_eq!(json["short_name"], area.short_name.as_str());
        let bare = serde_json::to_value(start()).unwrap();
        assert!(bare.get("group").is_none() && bare.get("short_name").is_none());
        let back: Area = serde_json::from_value(json).unwrap();
        assert_eq!(&back, area);
    }

    #[test]
    fn no_two_areas_share_a_name() {
        for (theme, language) in [
            ("crystal caves", Language::En),
            ("洞穴", Language::Zh),
            ("", Language::En),
        ] {
            // 300 areas: more than moods and places can name.
            let all = grown(theme, language, 10, MAX_SIZE);
            let names: BTreeSet<String> = all.iter().map(|a| a.name.to_lowercase()).collect();
            assert_eq!(names.len(), all.len(), "{theme:?}");
            // Numbered names number their short names too: a group's
            // places are told apart by them.
            if !theme.is_empty() {
                let short: BTreeSet<String> =
                    all.iter().map(|a| a.short_name.to_lowercase()).collect();
                assert_eq!(short.len(), all.len(), "{theme:?}");
            }
            assert!(!names.contains("gate"));
        }
        assert_eq!(
            grown("洞穴", Language::Zh, 3, 6),
            grown("洞穴", Language::Zh, 3, 6)
        );
    }

    #[test]
    fn no_place_is_called_by_another_places_name_or_short_name() {
        // A themed place's short name ("Silent Gallery") is a name the game
        // master and the player use for it: no other place may be called
        // so, whichever of the two was made first.
        for themes in [["", "crystal caves"], ["crystal caves", ""]] {
            let from = start();
            let mut all = vec![from.clone()];
            for (seed, theme) in (0..12u64).zip(themes.iter().cycle()) {
                let map = generate(&MapRequest {
                    from: Some(&from),
                    existing: &all,
                    theme,
                    language: Language::En,
                    size: MAX_SIZE,
                    seed,
                })
                .unwrap();
                all.extend(map.areas);
            }
            let mut called = std::collections::HashMap::new();
            for a in &all {
                for name in [&a.name, &a.short_name] {
                    if name.is_empty() {
                        continue;
                    }
                    if let Some(other) = called.insert(name.to_lowercase(), &a.area_id) {
                        assert_eq!(other, &a.area_id, "{name:?} names two places ({themes:?})");
                    }
                }
            }
        }
    }

    #[test]
    fn the_words_do_not_move_the_areas() {
        // Names draw from their own generator: the same seed lays out the
        // same map in either language.
        let en = gen_themed("crystal caves", Language::En);
        let zh = gen_themed("crystal caves", Language::Zh);
        let spots = |m: &GeneratedMap| {
            m.areas
                .iter()
                .map(|a| (a.x, a.y, a.reachable_area_ids.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(spots(&en), spots(&zh));
        assert_ne!(en.areas[0].name, zh.areas[0].name);
    }

    /// A one-area map at `(x, y)` with id `id`, and what grows from it.
    fn grow_at(id: &str, x: i64, y: i64, root: bool, seed: u64) -> Result<GeneratedMap, MapError> {
        let mut from = start();
        from.area_id = id.into();
        from.x = x;
        from.y = y;
        let existing = [from.clone()];
        generate(&MapRequest {
            from: (!root).then_some(&from),
            existing: &existing,
            theme: "edge",
            language: Language::En,
            size: MAX_SIZE,
            seed,
        })
    }

    #[test]
    fn the_edges_of_the_number_ranges_are_errors_not_overflows() {
        // The highest area number leaves no fresh id.
        let max_id = format!("area_{}", u64::MAX);
        assert_eq!(
            grow_at(&max_id, 0, 0, false, 1).err(),
            Some(MapError::NoFreshIds)
        );
        let near_max = format!("area_{}", u64::MAX - 5);
        assert_eq!(
            grow_at(&near_max, 0, 0, false, 1).err(),
            Some(MapError::NoFreshIds)
        );
        // A root layer below an area at the bottom of the range has no room.
        assert!(matches!(
            grow_at("area_001", 0, i64::MAX, true, 1),
            Err(MapError::NoRoom { .. })
        ));
        // At a corner, spots that would overflow are skipped: the map grows
        // inward.
        for (x, y) in [
            (i64::MAX, i64::MAX),
            (i64::MIN, i64::MIN),
            (i64::MAX, i64::MIN),
        ] {
            let map = grow_at("area_001", x, y, false, 3).unwrap();
            assert_eq!(map.areas.len(), MAX_SIZE);
            let spots: BTreeSet<_> = map.areas.iter().map(|a| (a.x, a.y)).collect();
            assert_eq!(spots.len(), MAX_SIZE, "no two areas share a spot");
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn coord() -> impl Strategy<Value = i64> {
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(i64::MIN + STEP * 8),
                Just(i64::MAX - STEP * 8),
                any::<i64>(),
                -1000i64..1000,
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_coordinates_and_ids_give_a_map_or_an_error(
                x in coord(),
                y in coord(),
                number in prop_oneof![Just(u64::MAX), Just(u64::MAX - 30), any::<u64>(), 0u64..1000],
                root in any::<bool>(),
                seed in any::<u64>(),
            ) {
                if let Ok(map) = grow_at(&format!("area_{number}"), x, y, root, seed) {
                    prop_assert_eq!(map.areas.len(), MAX_SIZE);
                    let spots: BTreeSet<_> = map.areas.iter().map(|a| (a.x, a.y)).collect();
                    prop_assert_eq!(spots.len(), MAX_SIZE);
                    for a in &map.areas {
                        prop_assert!(a.reachable_area_ids.len() <= MAX_LINKS_PER_AREA);
                    }
                }
            }
        }
    }
}
