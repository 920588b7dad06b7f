//! Zone-based exploration of an open world.
//!
//! Zones sit on an integer grid where one step is one mile, so travel time
//! follows from distance and speed. Generation is deterministic: the same
//! world prompt, seed, origin and existing zones always give the same zones,
//! so a generated world can be reproduced; the journal still stores the zones
//! themselves, never the seed alone.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::names::{self, Language, Phrase, TakenNames, article, pick_fresh};
use super::rng::{SplitMix64, text_seed};

/// Most zones generated in one call.
pub const MAX_ZONES_PER_CALL: usize = 3;
/// Movement log entries kept per player; older ones are dropped.
pub const MOVEMENT_LOG_LIMIT: usize = 200;
/// Walking pace, used when a save has no speed of its own.
pub const DEFAULT_MOVE_SPEED_MPH: f64 = 3.0;
/// Travel times within this many minutes of a whole number are not rounded
/// up, so floating-point noise never adds a minute.
const MINUTES_EPSILON: f64 = 1e-9;

/// The words of generated zones in one language.
struct Words {
    /// Each kind of place as a name ends with it and as a sentence says it
    /// (the same in English; "岭" and "山岭" in Chinese).
    places: &'static [(&'static str, &'static str)],
    moods: &'static [&'static str],
    details: &'static [&'static str],
    /// North, north-east, east, …, as `DIRECTIONS` orders them.
    directions: [&'static str; 8],
}

const ENGLISH: Words = Words {
    places: &[
        ("Vale", "vale"),
        ("Ridge", "ridge"),
        ("Marsh", "marsh"),
        ("Hollow", "hollow"),
        ("Steppe", "steppe"),
        ("Fen", "fen"),
        ("Glade", "glade"),
        ("Moor", "moor"),
        ("Crossing", "crossing"),
        ("Bluff", "bluff"),
        ("Basin", "basin"),
        ("Heath", "heath"),
        ("Thicket", "thicket"),
        ("Ford", "ford"),
        ("Tor", "tor"),
        ("Reach", "reach"),
    ],
    moods: &[
        "Misty",
        "Windswept",
        "Sunken",
        "Amber",
        "Quiet",
        "Thorned",
        "Pale",
        "Scorched",
        "Frostbitten",
        "Verdant",
        "Lonely",
        "Shattered",
    ],
    details: &[
        "A worn track winds between standing stones.",
        "Smoke rises from a camp that was abandoned in a hurry.",
        "Birds fall silent whenever the wind turns.",
        "Old boundary markers lean at odd angles.",
        "A stream cuts the ground into narrow channels.",
        "Ruined walls poke through the grass like broken teeth.",
        "Tracks of something large circle a dry well.",
        "The horizon shimmers as if the air itself were unsure.",
    ],
    directions: [
        "Northern",
        "Northeastern",
        "Eastern",
        "Southeastern",
        "Southern",
        "Southwestern",
        "Western",
        "Northwestern",
    ],
};

const CHINESE: Words = Words {
    places: &[
        ("缘", "边地"),
        ("岭", "山岭"),
        ("谷", "山谷"),
        ("坡", "山坡"),
        ("原", "原野"),
        ("野", "荒野"),
        ("林", "树林"),
        ("滩", "河滩"),
        ("坳", "山坳"),
        ("渡", "渡口"),
        ("崖", "断崖"),
        ("丘", "丘陵"),
        ("麓", "山麓"),
        ("泽", "湿地"),
    ],
    moods: &[
        "迷蒙", "多风", "低洼", "金黄", "寂静", "荒芜", "苍白", "焦黑", "霜冻", "苍翠", "孤寂",
        "破碎",
    ],
    details: &[
        "一条踏出的小径在竖立的石块间蜿蜒。",
        "一处营地还冒着烟，像是被匆忙遗弃。",
        "每当风向一变，鸟儿便都噤了声。",
        "古老的界碑东倒西歪。",
        "一条溪流把地面切成道道窄渠。",
        "断壁残垣从草丛中探出，像碎裂的牙齿。",
        "某种巨物的足迹绕着一口干井打转。",
        "地平线微微晃动，仿佛空气本身也拿不定主意。",
    ],
    directions: ["北", "东北", "东", "东南", "南", "西南", "西", "西北"],
};

/// The steps to each neighbour, in the order of `Words::directions`; the
/// grid's y grows southward, as the world map draws it.
const DIRECTIONS: [(i64, i64); 8] = [
    (0, -1),
    (1, -1),
    (1, 0),
    (1, 1),
    (0, 1),
    (-1, 1),
    (-1, 0),
    (-1, -1),
];

/// A point of the zone grid.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
pub struct GridPos {
    pub x: i64,
    pub y: i64,
    pub z: i64,
}

impl GridPos {
    pub fn new(x: i64, y: i64, z: i64) -> Self {
        Self { x, y, z }
    }

    /// The position as a tuple, the form [`distance_miles`] takes.
    pub fn tuple(self) -> (i64, i64, i64) {
        (self.x, self.y, self.z)
    }
}

impl From<(i64, i64, i64)> for GridPos {
    fn from((x, y, z): (i64, i64, i64)) -> Self {
        Self { x, y, z }
    }
}

/// A zone of the open world, on an integer grid (one grid step is one mile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Zone {
    pub zone_id: String,
    pub name: String,
    pub description: String,
    pub x: i64,
    pub y: i64,
    pub z: i64,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The world prompt the zone was made for, so later content keeps its theme.
    #[serde(default)]
    pub world_prompt: String,
}

impl Zone {
    pub fn pos(&self) -> GridPos {
        GridPos::new(self.x, self.y, self.z)
    }
}

/// "zone_{x}_{y}_{z}", e.g. zone_3_-1_0.
pub fn zone_id(x: i64, y: i64, z: i64) -> String {
    format!("zone_{x}_{y}_{z}")
}

/// What to generate and where.
pub struct ZoneRequest<'a> {
    /// Free text describing the world; names and descriptions keep its
    /// noun phrase.
    pub world_prompt: &'a str,
    /// The language of the names and descriptions.
    pub language: Language,
    /// Zones wanted, clamped to `1..=MAX_ZONES_PER_CALL`.
    pub count: usize,
    /// The cell the new zones gather around, usually the player's.
    pub near: (i64, i64, i64),
    /// Every zone already in the world; their cells are never reused.
    pub existing: &'a [Zone],
    pub seed: u64,
}

/// Deterministic procedural zones: `count` (clamped to
/// `1..=MAX_ZONES_PER_CALL`) zones on free cells around `near`, on the same
/// level. The 8 neighbours are tried first in an order chosen by the seed,
/// then ring 2, 3 and so on; a cell taken by `existing` or `near` itself is
/// never used. Fewer zones come back only when `near` sits at the very edge of
/// the `i64` grid and no cell is left there.
pub fn generate_zones(req: &ZoneRequest<'_>) -> Vec<Zone> {
    let mut rng = SplitMix64::new(req.seed ^ text_seed(req.world_prompt));
    let count = req.count.clamp(1, MAX_ZONES_PER_CALL);
    let cells = free_cells(&mut rng, req, count);

    let phrase = Phrase::of(req.world_prompt);
    let world_prompt = req.world_prompt.trim();
    let mut names = TakenNames::new(req.existing.iter().map(|z| z.name.as_str()));

    let mut zones = Vec::with_capacity(cells.len());
    for (x, y, z) in cells {
        let heading = heading(req.near, (x, y));
        let text = zone_text(&mut rng, phrase.as_ref(), req.language, heading, &mut names);
        let mut tags = vec!["generated".to_owned(), text.place.to_owned()];
        if let Some(p) = &phrase {
            tags.push(p.text().to_lowercase());
        }
        zones.push(Zone {
            zone_id: zone_id(x, y, z),
            name: text.name,
            description: text.description,
            x,
            y,
            z,
            tags,
            world_prompt: world_prompt.to_owned(),
        });
    }
    zones
}

/// Which of [`DIRECTIONS`] leads from `near` towards `cell` (a cell other
/// than `near`'s own, on its level).
fn heading(near: (i64, i64, i64), cell: (i64, i64)) -> Option<usize> {
    // Compared, not subtracted: cells at the grid's edge cannot overflow.
    let step = (cell.0.cmp(&near.0) as i64, cell.1.cmp(&near.1) as i64);
    DIRECTIONS.iter().position(|d| *d == step)
}

/// A zone's name and description, and its kind of place as a tag.
struct ZoneText {
    name: String,
    description: String,
    place: &'static str,
}

/// Names a zone after the player's phrase and the side of it the zone lies
/// on ("Misty Forest of Lanterns, Eastern Glade", "迷雾沼泽·东岭"); a mood
/// stands in for the side when the phrase already says it. Without a
/// phrase: a mood and a kind of place ("Quiet Glade"). The description
/// says the same in a sentence, sometimes with a detail after it.
fn zone_text(
    rng: &mut SplitMix64,
    phrase: Option<&Phrase>,
    language: Language,
    heading: Option<usize>,
    taken: &mut TakenNames,
) -> ZoneText {
    let words = match language {
        Language::En => &ENGLISH,
        Language::Zh => &CHINESE,
    };
    let side = heading
        .map(|h| words.directions[h])
        .filter(|d| !names::repeats(phrase, d));
    let (name, (mood, (_, long))) = taken.claim(|| {
        let mood = *pick_fresh(rng, words.moods, |w| names::repeats(phrase, w));
        let place = *pick_fresh(rng, words.places, |(short, long)| {
            names::repeats(phrase, short) || names::repeats(phrase, long)
        });
        let name = match (language, phrase) {
            (Language::En, None) => format!("{mood} {}", place.0),
            (Language::En, Some(p)) => {
                format!("{}, {} {}", p.title(), side.unwrap_or(mood), place.0)
            }
            (Language::Zh, None) => format!("{mood}{}", place.1),
            (Language::Zh, Some(p)) => format!("{}·{}{}", p.text(), side.unwrap_or(mood), place.0),
        };
        (name, (mood, place))
    });
    let (a, m) = (article(mood), mood.to_lowercase());
    let mut description = match (language, phrase, side) {
        (Language::En, None, _) => format!("{a} {m} {long} far from any road."),
        (Language::En, Some(p), Some(side)) => format!(
            "On the {} side of the {} lies {} {m} {long}.",
            side.to_lowercase(),
            p.text(),
            a.to_lowercase()
        ),
        (Language::En, Some(p), None) => format!(
            "Deep in the {} lies {} {m} {long}.",
            p.text(),
            a.to_lowercase()
        ),
        (Language::Zh, None, _) => format!("一处{mood}的{long}，远离任何道路。"),
        (Language::Zh, Some(p), Some(side)) => {
            format!("{}的{side}边，是一处{mood}的{long}。", p.in_chinese())
        }
        (Language::Zh, Some(p), None) => format!("{}深处，是一处{mood}的{long}。", p.in_chinese()),
    };
    // One or two sentences, so descriptions do not all read alike.
    if rng.below(2) == 0 {
        if language == Language::En {
            description.push(' ');
        }
        let detail: &&str = rng.pick(words.details);
        description.push_str(detail);
    }
    ZoneText {
        name,
        description,
        place: long,
    }
}

/// Up to `count` free cells around `req.near`, ring by ring, each ring in an
/// order chosen by `rng`.
fn free_cells(rng: &mut SplitMix64, req: &ZoneRequest<'_>, count: usize) -> Vec<(i64, i64, i64)> {
    let mut taken: HashSet<(i64, i64, i64)> =
        req.existing.iter().map(|z| (z.x, z.y, z.z)).collect();
    taken.insert(req.near);
    // Rings 1..=n hold at least 8n cells, so this many rings always has room
    // for every existing zone plus the new ones; the bound only matters at the
    // edge of the grid, where cells are lost to overflow.
    let max_ring = i64::try_from(req.existing.len().saturating_add(count)).unwrap_or(i64::MAX);

    let mut cells = Vec::with_capacity(count);
    for r in 1..=max_ring {
        let mut ring = ring_cells(req.near, r);
        shuffle(rng, &mut ring);
        for cell in ring {
            if taken.insert(cell) {
                cells.push(cell);
                if cells.len() == count {
                    return cells;
                }
            }
        }
    }
    cells
}

/// The cells at Chebyshev distance `r` (> 0) from `c` on its level, skipping
/// any that would overflow the grid.
fn ring_cells(c: (i64, i64, i64), r: i64) -> Vec<(i64, i64, i64)> {
    let mut offsets = Vec::new();
    for d in -r..=r {
        offsets.push((d, -r));
        offsets.push((d, r));
    }
    for d in (1 - r)..r {
        offsets.push((-r, d));
        offsets.push((r, d));
    }
    offsets
        .into_iter()
        .filter_map(|(dx, dy)| Some((c.0.checked_add(dx)?, c.1.checked_add(dy)?, c.2)))
        .collect()
}

/// Fisher-Yates, driven by the seeded generator so the order is reproducible.
fn shuffle<T>(rng: &mut SplitMix64, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Straight-line distance in miles between grid points.
pub fn distance_miles(a: (i64, i64, i64), b: (i64, i64, i64)) -> f64 {
    // Subtracting as f64 cannot overflow, unlike i64 at the grid's edges.
    let dx = a.0 as f64 - b.0 as f64;
    let dy = a.1 as f64 - b.1 as f64;
    let dz = a.2 as f64 - b.2 as f64;
    (dx * dx + dy * dy + dz * dz).sqrt()
}

/// Whole minutes to travel `miles` at `speed_mph`: `ceil(miles / speed * 60)`,
/// at least 1. A speed that is not a positive finite number counts as
/// [`DEFAULT_MOVE_SPEED_MPH`], so a damaged save cannot stall travel; a
/// negative or NaN distance counts as none; the result saturates at `u32::MAX`.
pub fn travel_minutes(miles: f64, speed_mph: f64) -> u32 {
    let speed = if speed_mph.is_finite() && speed_mph > 0.0 {
        speed_mph
    } else {
        DEFAULT_MOVE_SPEED_MPH
    };
    let miles = if miles > 0.0 { miles } else { 0.0 };
    // Multiplying first keeps whole results whole (1 mile at 3 mph is 20, not
    // 20.000000000000004).
    let minutes = (miles * 60.0 / speed - MINUTES_EPSILON).ceil();
    // `as` saturates float-to-int casts, which is the behaviour wanted here.
    (minutes as u32).max(1)
}

/// One move between zones, kept in the player's movement log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MovementLogEntry {
    pub movement_log_id: String,
    /// `None` for the first placement, which has no origin zone.
    #[serde(default)]
    pub from_zone_id: Option<String>,
    pub to_zone_id: String,
    pub distance_miles: f64,
    pub duration_min: u32,
    pub turn: u64,
}

fn default_speed() -> f64 {
    DEFAULT_MOVE_SPEED_MPH
}

/// Where the player is in the zone world and how fast they travel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlayerRuntime {
    #[serde(default)]
    pub current_zone_id: Option<String>,
    #[serde(default)]
    pub position: GridPos,
    #[serde(default = "default_speed")]
    pub move_speed_mph: f64,
    #[serde(default)]
    pub movement_log: Vec<MovementLogEntry>,
}

impl Default for PlayerRuntime {
    fn default() -> Self {
        Self {
            current_zone_id: None,
            position: GridPos::default(),
            move_speed_mph: DEFAULT_MOVE_SPEED_MPH,
            movement_log: Vec::new(),
        }
    }
}

impl PlayerRuntime {
    /// Appends, dropping the oldest entries past [`MOVEMENT_LOG_LIMIT`] so a
    /// long session's save stays small.
    pub fn log_move(&mut self, entry: MovementLogEntry) {
        self.movement_log.push(entry);
        let excess = self.movement_log.len().saturating_sub(MOVEMENT_LOG_LIMIT);
        if excess > 0 {
            self.movement_log.drain(..excess);
        }
    }
}

/// A plain zone at a grid point, for tests.
#[cfg(test)]
pub(crate) fn zone_at(x: i64, y: i64, z: i64) -> Zone {
    Zone {
        zone_id: zone_id(x, y, z),
        name: format!("Zone {x} {y} {z}"),
        description: String::new(),
        x,
        y,
        z,
        tags: vec![],
        world_prompt: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen_with(
        prompt: &str,
        count: usize,
        near: (i64, i64, i64),
        existing: &[Zone],
        seed: u64,
    ) -> Vec<Zone> {
        generate_zones(&ZoneRequest {
            world_prompt: prompt,
            language: Language::of_text(prompt),
            count,
            near,
            existing,
            seed,
        })
    }

    fn chebyshev(a: (i64, i64, i64), b: (i64, i64, i64)) -> i64 {
        (a.0 - b.0).abs().max((a.1 - b.1).abs())
    }

    #[test]
    fn zone_ids() {
        let cases = [
            ((0, 0, 0), "zone_0_0_0"),
            ((3, -1, 0), "zone_3_-1_0"),
            ((-12, 7, -2), "zone_-12_7_-2"),
            (
                (i64::MIN, i64::MAX, 1),
                "zone_-9223372036854775808_9223372036854775807_1",
            ),
        ];
        for ((x, y, z), want) in cases {
            assert_eq!(zone_id(x, y, z), want);
        }
    }

    #[test]
    fn same_inputs_same_zones() {
        let existing = [zone_at(1, 0, 0)];
        let cases = [
            ("steampunk desert", 0),
            ("", 7),
            ("蒸汽朋克 沙漠", 99),
            ("A haunted forest, full of wolves", u64::MAX),
        ];
        for (prompt, seed) in cases {
            let a = gen_with(prompt, 3, (0, 0, 0), &existing, seed);
            let b = gen_with(prompt, 3, (0, 0, 0), &existing, seed);
            assert_eq!(a, b, "prompt {prompt:?} seed {seed}");
        }
        // Seed and prompt both feed the generator.
        let base = gen_with("haunted forest", 3, (0, 0, 0), &[], 1);
        assert_ne!(base, gen_with("haunted forest", 3, (0, 0, 0), &[], 2));
        assert_ne!(base, gen_with("frozen tundra", 3, (0, 0, 0), &[], 1));
        // The prompt is hashed lower-cased and trimmed.
        let shouty = gen_with("  HAUNTED FOREST ", 3, (0, 0, 0), &[], 1);
        assert_eq!(
            base.iter().map(|z| z.pos()).collect::<Vec<_>>(),
            shouty.iter().map(|z| z.pos()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn count_is_clamped() {
        let cases = [(0, 1), (1, 1), (2, 2), (3, 3), (4, 3), (usize::MAX, 3)];
        for (asked, want) in cases {
            assert_eq!(
                gen_with("moors", asked, (0, 0, 0), &[], 5).len(),
                want,
                "asked {asked}"
            );
        }
    }

    #[test]
    fn zones_take_free_cells_only() {
        // Every neighbour but one taken: the one free neighbour comes first,
        // the rest spill into ring 2.
        let near = (10, -4, 2);
        let mut existing: Vec<Zone> = ring_cells(near, 1)
            .into_iter()
            .filter(|c| *c != (11, -3, 2))
            .map(|(x, y, z)| zone_at(x, y, z))
            .collect();
        // Same cell on another level does not block.
        existing.push(zone_at(11, -3, 3));
        for seed in 0..20 {
            let zones = gen_with("ash wastes", 3, near, &existing, seed);
            assert_eq!(zones.len(), 3);
            assert_eq!(zones[0].pos().tuple(), (11, -3, 2));
            let mut seen = HashSet::new();
            for z in &zones {
                let cell = z.pos().tuple();
                assert_ne!(cell, near);
                assert_eq!(z.z, near.2, "same level");
                assert!(seen.insert(cell), "no two new zones share a cell");
                assert!(!existing.iter().any(|e| e.pos().tuple() == cell));
                assert_eq!(z.zone_id, zone_id(z.x, z.y, z.z));
            }
            assert!(
                zones[1..]
                    .iter()
                    .all(|z| chebyshev(z.pos().tuple(), near) == 2)
            );
        }
    }

    #[test]
    fn neighbours_come_first_in_a_seeded_order() {
        let mut firsts = HashSet::new();
        for seed in 0..40 {
            let zones = gen_with("", 3, (0, 0, 0), &[], seed);
            assert!(
                zones
                    .iter()
                    .all(|z| chebyshev(z.pos().tuple(), (0, 0, 0)) == 1)
            );
            firsts.insert(zones[0].pos());
        }
        assert!(firsts.len() > 1, "the seed chooses the order");
    }

    #[test]
    fn crowded_grid_still_finds_room() {
        let existing: Vec<Zone> = (-3..=3)
            .flat_map(|x| (-3..=3).map(move |y| zone_at(x, y, 0)))
            .collect();
        let zones = gen_with("", 3, (0, 0, 0), &existing, 3);
        assert_eq!(zones.len(), 3);
        assert!(
            zones
                .iter()
                .all(|z| chebyshev(z.pos().tuple(), (0, 0, 0)) == 4)
        );
    }

    #[test]
    fn grid_edge_does_not_overflow() {
        let near = (i64::MAX, i64::MIN, 0);
        let zones = gen_with("", 3, near, &[], 8);
        assert_eq!(zones.len(), 3);
        assert!(zones.iter().all(|z| z.x < i64::MAX || z.y > i64::MIN));
    }

    /// Three zones around the origin, named in `language`.
    fn gen_in(prompt: &str, language: Language, existing: &[Zone], seed: u64) -> Vec<Zone> {
        generate_zones(&ZoneRequest {
            world_prompt: prompt,
            language,
            count: 3,
            near: (0, 0, 0),
            existing,
            seed,
        })
    }

    /// Zones of `calls` calls around the origin, each seeing the ones before.
    fn grown(prompt: &str, language: Language, calls: u64) -> Vec<Zone> {
        let mut all: Vec<Zone> = Vec::new();
        for seed in 0..calls {
            let zones = gen_in(prompt, language, &all, seed);
            all.extend(zones);
        }
        all
    }

    #[test]
    fn english_names_keep_the_players_words_and_say_the_side() {
        let cases = [
            ("a misty forest of lanterns", "Misty Forest of Lanterns"),
            ("haunted pine forest", "Haunted Pine Forest"),
            ("misty marsh", "Misty Marsh"),
            ("Eastern marsh", "Eastern Marsh"),
            ("A haunted forest, full of wolves", "Haunted Forest"),
            ("the wilds", "Wilds"),
        ];
        for (prompt, title) in cases {
            let phrase = Phrase::of(prompt).unwrap();
            for seed in 0..40 {
                for z in gen_with(prompt, 3, (0, 0, 0), &[], seed) {
                    let (name, d) = (&z.name, &z.description);
                    let side = name.strip_prefix(&format!("{title}, ")).expect(name);
                    let (dir, place) = side.split_once(' ').expect(name);
                    // The side the zone lies on, unless the prompt says it.
                    let heading = heading((0, 0, 0), (z.x, z.y)).unwrap();
                    let wanted = ENGLISH.directions[heading];
                    if phrase.repeats(wanted) {
                        assert!(ENGLISH.moods.contains(&dir), "{name}");
                        assert!(d.starts_with("Deep in the "), "{d}");
                    } else {
                        assert_eq!(dir, wanted, "{name} at {},{}", z.x, z.y);
                        let on = format!("On the {} side of the ", wanted.to_lowercase());
                        assert!(d.starts_with(&on), "{d}");
                    }
                    assert!(d.contains(phrase.text()), "{d}");
                    assert_eq!(names::doubled_word(name), None, "{name}");
                    assert_eq!(
                        names::doubled_word(d.split('.').next().unwrap()),
                        None,
                        "{d}"
                    );
                    // "lies a quiet glade", "lies an amber ford".
                    let (_, after) = d.split_once(" lies ").unwrap();
                    let (article, rest) = after.split_once(' ').unwrap();
                    let vowel = rest.starts_with(['a', 'e', 'i', 'o', 'u']);
                    assert_eq!(article, if vowel { "an" } else { "a" }, "{d}");
                    assert!(z.tags.contains(&place.to_lowercase()), "{:?}", z.tags);
                    assert!(z.tags.contains(&phrase.text().to_lowercase()));
                }
            }
        }
    }

    #[test]
    fn a_prompt_that_names_nothing_gives_a_mood_and_a_place() {
        for prompt in ["The world", "", "of an", "!!!"] {
            for z in gen_with(prompt, 3, (0, 0, 0), &[], 11) {
                assert_eq!(z.name.split(' ').count(), 2, "{}", z.name);
                assert!(
                    z.description.contains(" far from any road."),
                    "{}",
                    z.description
                );
                assert_eq!(z.tags.len(), 2, "{:?}", z.tags);
                assert_eq!(z.world_prompt, prompt.trim());
            }
        }
    }

    #[test]
    fn chinese_prompts_give_chinese_names_and_descriptions() {
        let cases = [
            ("迷雾沼泽", "迷雾沼泽"),
            ("一片迷雾沼泽，到处是灯笼", "迷雾沼泽"),
            ("剑与魔法世界", "剑与魔法世界"),
            ("东部荒原", "东部荒原"),
            ("荒野", "荒野"),
            ("the 山谷 of mist", "山谷"),
        ];
        let ascii_letter = |s: &str| s.chars().any(|c| c.is_ascii_alphabetic());
        for (prompt, phrase) in cases {
            for seed in 0..40 {
                for z in gen_with(prompt, 3, (0, 0, 0), &[], seed) {
                    let (name, d) = (&z.name, &z.description);
                    assert!(!ascii_letter(name) && !ascii_letter(d), "{name}: {d}");
                    assert!(name.starts_with(&format!("{phrase}·")), "{name}");
                    assert!(names::adds_fresh_chinese(name, phrase), "{name}");
                    assert!(d.starts_with(phrase) && d.ends_with('。'), "{d}");
                    let heading = heading((0, 0, 0), (z.x, z.y)).unwrap();
                    let side = CHINESE.directions[heading];
                    if !phrase.contains(side.chars().next().unwrap()) {
                        assert!(name.starts_with(&format!("{phrase}·{side}")), "{name}");
                        assert!(d.starts_with(&format!("{phrase}的{side}边")), "{d}");
                    }
                }
            }
        }
        // Without a prompt's phrase, still Chinese.
        for z in gen_in("世界", Language::Zh, &[], 4) {
            assert!(
                !ascii_letter(&z.name) && z.description.contains("远离任何道路"),
                "{z:?}"
            );
        }
    }

    #[test]
    fn no_two_zones_share_a_name() {
        // More zones around one spot than sides and places can name.
        for (prompt, language) in [
            ("misty marsh", Language::En),
            ("迷雾沼泽", Language::Zh),
            ("", Language::En),
        ] {
            let all = grown(prompt, language, 80);
            let names: HashSet<String> = all.iter().map(|z| z.name.to_lowercase()).collect();
            assert_eq!(names.len(), all.len(), "{prompt:?}");
            if language == Language::En && !prompt.is_empty() {
                assert!(
                    all.iter().any(|z| z.name.ends_with(" (2)")),
                    "numbered when needed"
                );
            }
        }
        // The same calls give the same names.
        assert_eq!(
            grown("迷雾沼泽", Language::Zh, 5),
            grown("迷雾沼泽", Language::Zh, 5)
        );
    }

    #[test]
    fn the_language_follows_the_request_not_only_the_prompt() {
        let zones = gen_in("crystal caves", Language::Zh, &[], 1);
        // The player's words as written, the rest in Chinese.
        assert!(
            zones[0].name.starts_with("crystal caves·"),
            "{}",
            zones[0].name
        );
        assert!(
            zones[0].description.starts_with("“crystal caves”的"),
            "{}",
            zones[0].description
        );
    }

    #[test]
    fn distance_and_travel_math() {
        let distances = [
            ((0, 0, 0), (0, 0, 0), 0.0),
            ((0, 0, 0), (3, 4, 0), 5.0),
            ((1, 1, 1), (-1, -1, -1), 12f64.sqrt()),
            ((0, 0, 0), (0, 0, -2), 2.0),
        ];
        for (a, b, want) in distances {
            assert!((distance_miles(a, b) - want).abs() < 1e-12, "{a:?} {b:?}");
            assert_eq!(distance_miles(a, b), distance_miles(b, a));
        }
        let travel = [
            (1.0, 3.0, 20),
            (0.0, 3.0, 1),
            (0.01, 3.0, 1),
            (2f64.sqrt(), 3.0, 29),
            (5.0, 3.0, 100),
            (0.1, 3.0, 2),
            (10.0, 60.0, 10),
            (1.0, 0.0, 20),
            (1.0, -4.0, 20),
            (1.0, f64::NAN, 20),
            (-5.0, 3.0, 1),
            (f64::NAN, 3.0, 1),
            (1e300, 3.0, u32::MAX),
        ];
        for (miles, speed, want) in travel {
            assert_eq!(travel_minutes(miles, speed), want, "{miles} mi at {speed}");
        }
    }

    #[test]
    fn runtime_defaults() {
        let cases = [
            ("{}", PlayerRuntime::default()),
            (
                r#"{"current_zone_id":"zone_1_0_0","position":{"x":1,"y":0,"z":0}}"#,
                PlayerRuntime {
                    current_zone_id: Some("zone_1_0_0".into()),
                    position: GridPos::new(1, 0, 0),
                    ..PlayerRuntime::default()
                },
            ),
        ];
        for (json, want) in cases {
            let got: PlayerRuntime = serde_json::from_str(json).unwrap();
            assert_eq!(got, want, "{json}");
        }
        assert_eq!(PlayerRuntime::default().move_speed_mph, 3.0);
    }

    #[test]
    fn movement_log_keeps_the_newest() {
        let cases = [
            (0, 0),
            (1, 1),
            (MOVEMENT_LOG_LIMIT, MOVEMENT_LOG_LIMIT),
            (MOVEMENT_LOG_LIMIT + 57, MOVEMENT_LOG_LIMIT),
        ];
        for (moves, kept) in cases {
            let mut p = PlayerRuntime::default();
            for turn in 0..moves as u64 {
                p.log_move(MovementLogEntry {
                    movement_log_id: format!("move_{turn}"),
                    from_zone_id: None,
                    to_zone_id: "zone_0_0_0".into(),
                    distance_miles: 1.0,
                    duration_min: 20,
                    turn,
                });
            }
            assert_eq!(p.movement_log.len(), kept, "{moves} moves");
            if moves > 0 {
                assert_eq!(
                    p.movement_log.last().map(|e| e.turn),
                    Some(moves as u64 - 1)
                );
                assert_eq!(
                    p.movement_log.first().map(|e| e.turn),
                    Some((moves - kept) as u64)
                );
            }
        }
    }
}
