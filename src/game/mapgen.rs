//! Deterministic map generation for `map_generate`.
//!
//! The same seed, theme, size and starting map always give the same areas, so
//! a generated map can be reproduced; the journal still stores the areas
//! themselves, never the seed alone.

use std::collections::BTreeSet;

use super::rng::{SplitMix64, text_seed};
use super::state::{Area, AreaId};

/// Default number of areas generated.
pub const DEFAULT_SIZE: usize = 6;
/// Most areas generated in one call.
pub const MAX_SIZE: usize = 30;
/// Distance between neighbouring generated areas on the layout.
const STEP: i64 = 110;

const PLACES: &[&str] = &[
    "Hall", "Passage", "Grotto", "Chamber", "Vault", "Stair", "Gallery", "Well", "Shrine",
    "Cistern", "Bridge", "Crypt", "Garden", "Archive", "Landing",
];
const MOODS: &[&str] = &[
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
];
const DETAILS: &[&str] = &[
    "Water drips from the ceiling into shallow pools.",
    "Old carvings cover the walls, worn smooth by time.",
    "A cold draught carries the smell of wet stone.",
    "Roots have split the flagstones apart.",
    "Faint light glimmers somewhere ahead.",
    "Rusted chains hang from iron rings.",
    "Dust lies thick and undisturbed.",
    "The air hums with a low, distant sound.",
];

/// What to generate and where to attach it.
pub struct MapRequest<'a> {
    /// The area the new ones connect to; `None` starts a new root layer
    /// that is not joined to the existing map.
    pub from: Option<&'a Area>,
    /// Every area already on the map (for fresh ids and free positions).
    pub existing: &'a [Area],
    pub theme: &'a str,
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

pub fn generate(req: &MapRequest<'_>) -> GeneratedMap {
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
        + 1;
    let mut taken: BTreeSet<(i64, i64)> = req.existing.iter().map(|a| (a.x, a.y)).collect();
    let theme = title_case(req.theme.trim());
    let tag = req.theme.trim().to_lowercase();

    // A root layer starts below everything already drawn.
    let origin = match req.from {
        Some(f) => (f.x, f.y),
        None => (
            0,
            req.existing
                .iter()
                .map(|a| a.y)
                .max()
                .map_or(0, |y| y + STEP * 3),
        ),
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
        let (x, y) = free_spot(&mut rng, &mut taken, px, py);
        let id = AreaId(format!("area_{:03}", next_number + i as u64));
        let place = rng.pick(PLACES);
        let mood = rng.pick(MOODS);
        let name = if theme.is_empty() {
            format!("{mood} {place}")
        } else {
            format!("{mood} {theme} {place}")
        };
        let description = format!(
            "A {} {} shaped by {}. {}",
            mood.to_lowercase(),
            place.to_lowercase(),
            if tag.is_empty() { "time" } else { tag.as_str() },
            rng.pick(DETAILS)
        );
        areas.push(Area {
            area_id: id,
            name,
            description,
            reachable_area_ids: Vec::new(),
            x,
            y,
            z,
            tags: if tag.is_empty() {
                vec!["generated".into()]
            } else {
                vec!["generated".into(), tag.clone()]
            },
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
    GeneratedMap { areas, links }
}

fn free_spot(
    rng: &mut SplitMix64,
    taken: &mut BTreeSet<(i64, i64)>,
    px: i64,
    py: i64,
) -> (i64, i64) {
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
            let spot = (px + dx * STEP * ring, py + dy * STEP * ring);
            if taken.insert(spot) {
                return spot;
            }
        }
    }
    // Crowded: fall back to a spot offset by a unique amount.
    let spot = (px + STEP * 9 + taken.len() as i64, py);
    taken.insert(spot);
    spot
}

fn title_case(s: &str) -> String {
    s.split_whitespace()
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c).collect(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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
        }
    }

    fn gen_with(seed: u64, size: usize) -> GeneratedMap {
        let from = start();
        let existing = [from.clone()];
        generate(&MapRequest {
            from: Some(&from),
            existing: &existing,
            theme: "crystal caves",
            size,
            seed,
        })
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
            size: 4,
            seed: 3,
        });
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
}
