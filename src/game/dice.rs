//! Dice expressions such as `2d6+1`.

use serde::Serialize;

use super::rng::SplitMix64;

/// Most dice in one roll.
pub const MAX_DICE: u32 = 100;
/// Most sides on one die.
pub const MAX_SIDES: u32 = 1000;
/// Largest absolute modifier.
pub const MAX_MODIFIER: i64 = 1000;

/// A parsed `NdS+M` expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiceExpr {
    pub count: u32,
    pub sides: u32,
    pub modifier: i64,
}

/// The outcome of rolling an expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiceRoll {
    pub expression: String,
    pub rolls: Vec<u32>,
    pub modifier: i64,
    pub total: i64,
}

impl DiceExpr {
    /// Parses `NdS`, `dS`, `NdS+M` or `NdS-M` (spaces and case ignored).
    pub fn parse(input: &str) -> Result<Self, String> {
        let s: String = input
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_lowercase();
        let (count, rest) = s
            .split_once('d')
            .ok_or_else(|| format!("'{input}' is not a dice expression like 2d6+1"))?;
        let count: u32 = if count.is_empty() {
            1
        } else {
            count
                .parse()
                .map_err(|_| format!("bad dice count in '{input}'"))?
        };
        let (sides, modifier) = match rest.find(['+', '-']) {
            Some(i) => {
                let m: i64 = rest[i + 1..]
                    .parse()
                    .map_err(|_| format!("bad modifier in '{input}'"))?;
                (&rest[..i], if &rest[i..=i] == "-" { -m } else { m })
            }
            None => (rest, 0),
        };
        let sides: u32 = sides
            .parse()
            .map_err(|_| format!("bad number of sides in '{input}'"))?;
        if !(1..=MAX_DICE).contains(&count) {
            return Err(format!("dice count must be 1..={MAX_DICE}"));
        }
        if !(2..=MAX_SIDES).contains(&sides) {
            return Err(format!("dice sides must be 2..={MAX_SIDES}"));
        }
        if modifier.abs() > MAX_MODIFIER {
            return Err(format!("modifier must be within ±{MAX_MODIFIER}"));
        }
        Ok(Self {
            count,
            sides,
            modifier,
        })
    }

    pub fn roll(&self, rng: &mut SplitMix64) -> DiceRoll {
        let rolls: Vec<u32> = (0..self.count).map(|_| rng.roll(self.sides)).collect();
        let total = rolls.iter().map(|r| i64::from(*r)).sum::<i64>() + self.modifier;
        DiceRoll {
            expression: self.to_string(),
            rolls,
            modifier: self.modifier,
            total,
        }
    }
}

impl std::fmt::Display for DiceExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}d{}", self.count, self.sides)?;
        match self.modifier {
            0 => Ok(()),
            m if m > 0 => write!(f, "+{m}"),
            m => write!(f, "{m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_expressions() {
        let cases = [
            ("2d6+1", (2, 6, 1)),
            ("d20", (1, 20, 0)),
            ("3D8 - 2", (3, 8, -2)),
            ("100d1000+1000", (100, 1000, 1000)),
        ];
        for (input, (count, sides, modifier)) in cases {
            assert_eq!(
                DiceExpr::parse(input),
                Ok(DiceExpr {
                    count,
                    sides,
                    modifier
                }),
                "{input}"
            );
        }
    }

    #[test]
    fn refuses_bad_or_unbounded_expressions() {
        for input in [
            "", "6", "2x6", "0d6", "101d6", "2d1", "2d1001", "2d6+1001", "2d6+", "ad6",
        ] {
            assert!(DiceExpr::parse(input).is_err(), "{input} should be refused");
        }
    }

    #[test]
    fn roll_total_is_sum_plus_modifier() {
        let expr = DiceExpr::parse("4d6-3").unwrap();
        let roll = expr.roll(&mut SplitMix64::new(3));
        assert_eq!(roll.rolls.len(), 4);
        assert!(roll.rolls.iter().all(|r| (1..=6).contains(r)));
        let sum: i64 = roll.rolls.iter().map(|r| i64::from(*r)).sum();
        assert_eq!(roll.total, sum - 3);
        assert_eq!(roll.expression, "4d6-3");
    }
}
