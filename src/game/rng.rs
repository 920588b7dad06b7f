//! A small deterministic random number generator (SplitMix64).
//!
//! Used where the same seed must give the same result on every build and
//! platform (map generation); dice use it too, seeded from the OS, and their
//! outcome is journalled so replay never rolls again.

/// A seed from text: FNV-1a of the trimmed, lower-cased text. Stable across
/// builds and platforms, unlike std's hasher, so themes seed the same maps.
pub fn text_seed(text: &str) -> u64 {
    text.trim()
        .to_lowercase()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// SplitMix64: tiny, fast and good enough for game content.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded from the operating system's entropy.
    pub fn from_entropy() -> Self {
        Self::new(rand::random())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `1..=sides` (`sides` > 0).
    pub fn roll(&mut self, sides: u32) -> u32 {
        (self.below(u64::from(sides)) + 1) as u32
    }

    /// A uniform number in `0..n` (`n` > 0), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }

    /// Picks one element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn roll_stays_in_range_and_covers_all_faces() {
        let mut r = SplitMix64::new(1);
        let mut seen = [false; 6];
        for _ in 0..1000 {
            let v = r.roll(6);
            assert!((1..=6).contains(&v));
            seen[(v - 1) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
