//! Zone-based exploration of an open world.
//!
//! Zones sit on an integer grid where one step is one mile, so travel time
//! follows from distance and speed. Generation is deterministic: the same
//! world prompt, seed, origin and existing zones always give the same zones,
//! so a generated world can be reproduced; the journal still stores the zones
//! themselves, never the seed alone.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::rng::{SplitMix64, text_seed};

/// Most zones generated in one call.
pub const MAX_ZONES_PER_CALL: usize = 3;
/// Movement log entries kept per player; older ones are dropped.
pub const MOVEMENT_LOG_LIMIT: usize = 200;
/// Walking pace, used when a save has no speed of its own.
pub const DEFAULT_MOVE_SPEED_MPH: f64 = 3.0;
/// Shortest word of the world prompt that may theme a zone; shorter ones are
/// mostly articles and prepositions.
const MIN_THEME_WORD_CHARS: usize = 3;
/// Longest word of the world prompt that may theme a zone; longer runs are
/// usually unbroken text (e.g. a whole sentence without spaces) and would make
/// an unreadable name.
const MAX_THEME_WORD_CHARS: usize = 16;
/// Picks tried for a name no other zone has before a repeat is accepted.
const NAME_ATTEMPTS: usize = 8;
/// Travel times within this many minutes of a whole number are not rounded
/// up, so floating-point noise never adds a minute.
const MINUTES_EPSILON: f64 = 1e-9;

const PLACES: &[&str] = &[
    "Vale", "Ridge", "Marsh", "Hollow", "Steppe", "Fen", "Glade", "Moor", "Crossing", "Bluff",
    "Basin", "Heath", "Thicket", "Ford", "Downs", "Reach",
];
const MOODS: &[&str] = &[
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
];
const DETAILS: &[&str] = &[
    "A worn track winds between standing stones.",
    "Smoke rises from a camp that was abandoned in a hurry.",
    "Birds fall silent whenever the wind turns.",
    "Old boundary markers lean at odd angles.",
    "A stream cuts the ground into narrow channels.",
    "Ruined walls poke through the grass like broken teeth.",
    "Tracks of something large circle a dry well.",
    "The horizon shimmers as if the air itself were unsure.",
];
/// Prompt words too common to say anything about a world's theme.
const STOP_WORDS: &[&str] = &[
    "the", "and", "with", "for", "from", "into", "onto", "that", "this", "these", "those", "where",
    "which", "who", "whom", "whose", "what", "when", "while", "world", "are", "was", "were", "has",
    "have", "had", "its", "their", "there", "they", "them", "his", "her", "our", "your", "you",
    "but", "not", "all", "any", "some", "set", "full", "very", "been", "being", "over", "under",
    "about", "than", "then", "each", "every", "game", "setting",
];

/// A point of the zone grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Free text describing the world; its words theme names and descriptions.
    pub world_prompt: &'a str,
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

    let themes = theme_words(req.world_prompt);
    let world_prompt = req.world_prompt.trim();
    let mut used_names: HashSet<String> =
        req.existing.iter().map(|z| z.name.to_lowercase()).collect();

    let mut zones = Vec::with_capacity(cells.len());
    for (x, y, z) in cells {
        let theme = if themes.is_empty() {
            None
        } else {
            Some(rng.pick(&themes).as_str())
        };
        let (mood, place) = pick_name_parts(&mut rng, theme, &used_names);
        let name = zone_name(mood, theme, place);
        used_names.insert(name.to_lowercase());

        let what = format!(
            "{} {} {}",
            article(mood),
            mood.to_lowercase(),
            place.to_lowercase()
        );
        // Prompt words may be nouns or adjectives; "this {t} land" reads well
        // with either.
        let mut description = match theme {
            Some(t) => format!("{what} that bears the mark of this {t} land."),
            None => format!("{what} far from any road."),
        };
        // One or two sentences, so descriptions do not all read alike.
        if rng.below(2) == 0 {
            let detail = rng.pick(DETAILS);
            description.push(' ');
            description.push_str(detail);
        }

        let mut tags = vec!["generated".to_owned(), place.to_lowercase()];
        if let Some(t) = theme {
            tags.push(t.to_owned());
        }
        zones.push(Zone {
            zone_id: zone_id(x, y, z),
            name,
            description,
            x,
            y,
            z,
            tags,
            world_prompt: world_prompt.to_owned(),
        });
    }
    zones
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

/// A mood and place whose name is not taken yet, if a few tries find one.
fn pick_name_parts(
    rng: &mut SplitMix64,
    theme: Option<&str>,
    used: &HashSet<String>,
) -> (&'static str, &'static str) {
    let mut parts = (*rng.pick(MOODS), *rng.pick(PLACES));
    for _ in 1..NAME_ATTEMPTS {
        if !used.contains(&zone_name(parts.0, theme, parts.1).to_lowercase()) {
            break;
        }
        parts = (*rng.pick(MOODS), *rng.pick(PLACES));
    }
    parts
}

/// "An" before a vowel, else "A"; good enough for the fixed word lists
/// (also used by the map's areas and the offline game master).
pub(crate) fn article(word: &str) -> &'static str {
    match word.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "An",
        _ => "A",
    }
}

fn zone_name(mood: &str, theme: Option<&str>, place: &str) -> String {
    match theme {
        Some(t) => format!("{mood} {} {place}", title_case(t)),
        None => format!("{mood} {place}"),
    }
}

/// Distinct, lower-cased words of the prompt that can carry its theme, in
/// order of first appearance so the result does not depend on hashing.
fn theme_words(prompt: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in prompt.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        let chars = word.chars().count();
        let usable = (MIN_THEME_WORD_CHARS..=MAX_THEME_WORD_CHARS).contains(&chars)
            && !word.chars().all(|c| c.is_numeric())
            && !STOP_WORDS.contains(&word.as_str());
        if usable && !words.contains(&word) {
            words.push(word);
        }
    }
    words
}

fn title_case(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

    #[test]
    fn names_and_descriptions_follow_the_prompt() {
        let cases = [
            ("clockwork", Some("clockwork")),
            ("The world", None),
            ("", None),
            ("蒸汽朋克", Some("蒸汽朋克")),
        ];
        for (prompt, theme) in cases {
            for z in gen_with(prompt, 3, (0, 0, 0), &[], 11) {
                assert!(z.tags.contains(&"generated".to_owned()));
                assert_eq!(z.world_prompt, prompt.trim());
                assert!(!z.name.is_empty());
                let sentences = z.description.matches('.').count();
                assert!((1..=2).contains(&sentences), "{:?}", z.description);
                match theme {
                    Some(t) => {
                        assert!(z.tags.contains(&t.to_owned()), "{:?}", z.tags);
                        assert!(z.name.to_lowercase().contains(t), "{}", z.name);
                        assert!(z.description.contains(t), "{}", z.description);
                    }
                    None => assert_eq!(z.name.split(' ').count(), 2, "{}", z.name),
                }
            }
        }
    }

    #[test]
    fn theme_words_skip_noise() {
        let cases: [(&str, &[&str]); 4] = [
            ("A dark and stormy world", &["dark", "stormy"]),
            ("Ice, ICE, ice!", &["ice"]),
            ("1920 noir", &["noir"]),
            ("of an", &[]),
        ];
        for (prompt, want) in cases {
            assert_eq!(theme_words(prompt), want, "{prompt:?}");
        }
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
