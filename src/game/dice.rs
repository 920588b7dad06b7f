//! Dice expressions such as `2d6+1`.

use serde::Serialize;

use super::rng::SplitMix64;

/// Most dice in one roll.
pub const MAX_DICE: u32 = 100;
/// Most sides on one die.
pub const MAX_SIDES: u32 = 1000;
/// Largest absolute modifier.
pub const MAX_MODIFIER: i64 = 1000;
/// Longest expression read, in characters, spaces included; the tool's
/// schema allows 32, so this only stops a direct caller's megabyte.
pub const MAX_EXPRESSION_CHARS: usize = 64;
/// Lowest total any accepted roll can have: one die showing 1, the most
/// negative modifier.
pub const MIN_TOTAL: i64 = 1 - MAX_MODIFIER;
/// Highest total any accepted roll can have: every die at its highest, the
/// largest modifier. Both bounds are far inside `i64`, so totals never overflow.
pub const MAX_TOTAL: i64 = MAX_DICE as i64 * MAX_SIDES as i64 + MAX_MODIFIER;
/// Digits read for one number; more cannot be within any bound above.
const MAX_DIGITS: usize = 9;

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

/// A run of ASCII digits (no sign, no spaces) as a number, or `None` when it
/// is empty, holds anything else, or is too long to be within a bound. Signs
/// are not taken here: `u32::from_str` would accept `+5`, and the modifier's
/// sign is the operator's alone (so `1d6--5` is refused, not read as `+5`).
fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > MAX_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl DiceExpr {
    /// Parses `NdS`, `dS`, `NdS+M` or `NdS-M` (spaces and case ignored).
    /// Every number is read as plain digits and checked against its bound
    /// before any arithmetic, so no input can overflow.
    pub fn parse(input: &str) -> Result<Self, String> {
        if input.chars().count() > MAX_EXPRESSION_CHARS {
            return Err(format!(
                "a dice expression is at most {MAX_EXPRESSION_CHARS} characters, like 2d6+1"
            ));
        }
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
            digits(count).ok_or_else(|| format!("bad dice count in '{input}'"))?
        };
        let (sides, modifier) = match rest.find(['+', '-']) {
            Some(i) => {
                let m =
                    digits(&rest[i + 1..]).ok_or_else(|| format!("bad modifier in '{input}'"))?;
                let m = i64::from(m);
                if m > MAX_MODIFIER {
                    return Err(format!("modifier must be within ±{MAX_MODIFIER}"));
                }
                // `m` is at most MAX_MODIFIER here, so negating cannot overflow.
                (&rest[..i], if rest[i..].starts_with('-') { -m } else { m })
            }
            None => (rest, 0),
        };
        let sides = digits(sides).ok_or_else(|| format!("bad number of sides in '{input}'"))?;
        if !(1..=MAX_DICE).contains(&count) {
            return Err(format!("dice count must be 1..={MAX_DICE}"));
        }
        if !(2..=MAX_SIDES).contains(&sides) {
            return Err(format!("dice sides must be 2..={MAX_SIDES}"));
        }
        Ok(Self {
            count,
            sides,
            modifier,
        })
    }

    /// Rolls the dice. The total is within [`MIN_TOTAL`]..=[`MAX_TOTAL`] for
    /// any parsed expression; the sum saturates rather than wraps, so even
    /// a hand-built expression beyond the bounds cannot panic.
    pub fn roll(&self, rng: &mut SplitMix64) -> DiceRoll {
        let rolls: Vec<u32> = (0..self.count)
            .map(|_| rng.roll(self.sides.max(1)))
            .collect();
        let total = rolls
            .iter()
            .fold(self.modifier, |sum, r| sum.saturating_add(i64::from(*r)));
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
        let long = format!("1d6{}", " ".repeat(MAX_EXPRESSION_CHARS));
        for input in [
            "",
            "6",
            "2x6",
            "0d6",
            "101d6",
            "2d1",
            "2d1001",
            "2d6+1001",
            "2d6+",
            "ad6",
            // Numbers past every integer type, and signs where none belong:
            // each once slipped past a bound by overflowing.
            "1d6--9223372036854775808",
            "1d6+-9223372036854775808",
            "1d6-9223372036854775808",
            "1d6+9223372036854775807",
            "1d6+99999999999999999999999",
            "4294967297d6",
            "1d4294967298",
            "+2d6",
            "2d+6",
            "1d6+-3",
            "1d6++3",
            "2d6+1+2",
            "1d６",
            long.as_str(),
        ] {
            assert!(DiceExpr::parse(input).is_err(), "{input} should be refused");
        }
    }

    #[test]
    fn totals_stay_within_the_documented_bounds_at_the_extremes() {
        let mut rng = SplitMix64::new(5);
        let low = DiceExpr::parse("1d2-1000").unwrap().roll(&mut rng);
        assert!((MIN_TOTAL..=MIN_TOTAL + 1).contains(&low.total));
        let high = DiceExpr::parse("100d1000+1000").unwrap().roll(&mut rng);
        assert!(high.total <= MAX_TOTAL);
        // A hand-built expression past the bounds saturates, never panics.
        let wild = DiceExpr {
            count: 2,
            sides: 0,
            modifier: i64::MAX,
        };
        assert_eq!(wild.roll(&mut rng).total, i64::MAX);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Text shaped like a dice expression, with numbers of any size.
        fn dice_like() -> impl Strategy<Value = String> {
            let number = prop_oneof![
                Just(String::new()),
                (0u64..2000).prop_map(|n| n.to_string()),
                any::<i64>().prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                "[0-9]{10,30}",
            ];
            let op = prop_oneof![Just(""), Just("+"), Just("-"), Just("--"), Just("+-")];
            (
                number.clone(),
                prop_oneof![Just("d"), Just("D"), Just("x")],
                number.clone(),
                op,
                number,
            )
                .prop_map(|(n, d, s, op, m)| format!("{n}{d}{s}{op}{m}"))
        }

        fn check(input: &str) -> Result<(), TestCaseError> {
            if let Ok(expr) = DiceExpr::parse(input) {
                prop_assert!((1..=MAX_DICE).contains(&expr.count));
                prop_assert!((2..=MAX_SIDES).contains(&expr.sides));
                prop_assert!(expr.modifier.abs() <= MAX_MODIFIER);
                let roll = expr.roll(&mut SplitMix64::new(input.len() as u64));
                prop_assert!((MIN_TOTAL..=MAX_TOTAL).contains(&roll.total));
                let count = i64::from(expr.count);
                let most = count * i64::from(expr.sides);
                prop_assert!((count + expr.modifier..=most + expr.modifier).contains(&roll.total));
                prop_assert_eq!(DiceExpr::parse(&roll.expression), Ok(expr));
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn parsing_any_text_never_panics(input in any::<String>()) {
                check(&input)?;
            }

            #[test]
            fn accepted_rolls_are_within_their_bounds(input in dice_like()) {
                check(&input)?;
            }
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
