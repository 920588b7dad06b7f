//! Calendar dates from days since 1970-01-01, for the times questd writes
//! (RFC 3339 in stored rows, answers and log lines) without a date crate.

/// The proleptic Gregorian date (year, month 1–12, day 1–31) `days` days
/// after 1970-01-01 (before it when negative): Howard Hinnant's
/// `civil_from_days`.
pub fn date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_read_as_their_dates() {
        // Checked against Python's `datetime.date.fromordinal`.
        for (days, want) in [
            (0, (1970, 1, 1)),
            (-1, (1969, 12, 31)),
            (11_016, (2000, 2, 29)),
            (47_541, (2100, 3, 1)),
            (20_785, (2026, 11, 28)),
            (2_932_896, (9999, 12, 31)),
        ] {
            assert_eq!(date(days), want, "{days}");
        }
    }
}
