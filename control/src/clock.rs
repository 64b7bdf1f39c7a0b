//! The time control reckons with: Unix seconds (and milliseconds), UTC, and the calendar
//! (months, resets, dates) on it.

use std::time::{SystemTime, UNIX_EPOCH};

use hearth_shared::wire::ResetStrategy;

/// Unix seconds now.
pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Unix milliseconds now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

const DAY: u64 = 86_400;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil (year, month) of a day count since 1970-01-01.
fn civil_month(days: i64) -> (i64, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).expect("month in 1..=12"))
}

/// The day (since 1970-01-01) the UTC month of `now` began.
pub(crate) fn month_start_day(now: u64) -> u64 {
    let (year, month) = civil_month((now / DAY) as i64);
    u64::try_from(days_from_civil(year, month, 1)).unwrap_or(0)
}

/// When traffic next goes back to zero after `now` (UTC), or 0 for never.
pub(crate) fn next_reset(reset: ResetStrategy, now: u64) -> u64 {
    let today = now / DAY;
    match reset {
        ResetStrategy::Never => 0,
        ResetStrategy::Daily => (today + 1) * DAY,
        // 1970-01-01 was a Thursday; Monday is 4 days later in the cycle.
        ResetStrategy::Weekly => (today + 7 - (today + 3) % 7) * DAY,
        ResetStrategy::Monthly => {
            let (year, month) = civil_month(i64::try_from(today).expect("sane clock"));
            let (year, month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
            u64::try_from(days_from_civil(year, month, 1)).expect("after 1970") * DAY
        }
        ResetStrategy::Rolling30 => now + 30 * DAY,
    }
}

/// The first midnight (UTC) after `now` on day `day` (1 to 28) of a month: when a node's
/// cap month that holds `now` ends.
pub(crate) fn next_on_day(day: u32, now: u64) -> u64 {
    let (year, month) = civil_month(i64::try_from(now / DAY).expect("sane clock"));
    let this = u64::try_from(days_from_civil(year, month, day)).unwrap_or(0) * DAY;
    if this > now {
        return this;
    }
    let (year, month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    u64::try_from(days_from_civil(year, month, day)).unwrap_or(0) * DAY
}

/// The last midnight (UTC) on day `day` of a month at or before `now`: when a monthly cap's
/// month began.
pub(crate) fn last_on_day(day: u32, now: u64) -> u64 {
    let (year, month) = civil_month(i64::try_from(now / DAY).expect("sane clock"));
    let this = u64::try_from(days_from_civil(year, month, day)).unwrap_or(0) * DAY;
    if this <= now {
        return this;
    }
    let (year, month) = if month == 1 { (year - 1, 12) } else { (year, month - 1) };
    u64::try_from(days_from_civil(year, month, day)).unwrap_or(0) * DAY
}

/// A date as the profile writes it: `2026-12-01`.
pub(crate) fn civil_date(at: u64) -> String {
    let days = i64::try_from(at / DAY).unwrap_or(0);
    let (year, month) = civil_month(days);
    let day = days - days_from_civil(year, month, 1) + 1;
    format!("{year}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_month_began_on_its_last_day() {
        // 2026-11-30 12:00 UTC: on day 15 the month began 2026-11-15; on day 28, 2026-11-28.
        assert_eq!(civil_date(last_on_day(15, 1_796_040_000)), "2026-11-15");
        assert_eq!(civil_date(last_on_day(28, 1_796_040_000)), "2026-11-28");
        // 2026-11-03: on day 5, 2026-10-05; a day at its own midnight is that day.
        let third = (20_758 + 2) * DAY;
        assert_eq!(civil_date(last_on_day(5, third + 3600)), "2026-10-05");
        assert_eq!(last_on_day(3, third), third);
        // Across a year: 2026-01-02, day 10: 2025-12-10.
        let january = (days_from_civil(2026, 1, 2) as u64) * DAY;
        assert_eq!(civil_date(last_on_day(10, january)), "2025-12-10");
    }

    #[test]
    fn months_start_on_their_first_day() {
        // 2026-11-30 12:00 UTC: the month began on 2026-11-01, day 20,758.
        assert_eq!(month_start_day(1_796_040_000), 20_758);
        assert_eq!(month_start_day(20_758 * DAY), 20_758);
        assert_eq!(month_start_day(20_758 * DAY - 1), 20_727, "2026-10-01");
    }

    #[test]
    fn civil_dates_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for days in [0, 59, 60, 365, 11_016, 11_017, 20_000, 20_454] {
            let (year, month) = civil_month(days);
            let first = days_from_civil(year, month, 1);
            assert!(first <= days && days - first < 31, "{days}: {year}-{month}");
        }
    }

    /// A cap month ends at midnight UTC on its day of the next month, or of this month
    /// when the day is still ahead; exactly at a boundary, a whole month is ahead.
    #[test]
    fn cap_months_end_on_their_day() {
        // 2026-11-30 12:00 UTC.
        let now = 1_796_040_000;
        assert_eq!(next_on_day(1, now), 1_796_083_200); // 2026-12-01
        assert_eq!(next_on_day(28, now), 1_798_416_000); // 2026-12-28
        assert_eq!(next_on_day(15, 1_794_268_800), 1_794_700_800); // 2026-11-10 → 2026-11-15
        assert_eq!(next_on_day(1, 1_796_083_200), 1_798_761_600); // 2026-12-01 → 2027-01-01
        assert_eq!(civil_date(1_796_083_200), "2026-12-01");
        assert_eq!(civil_date(1_798_761_600 - 1), "2026-12-31");
    }

    #[test]
    fn resets_land_on_their_boundaries() {
        // 2026-11-30 12:00 UTC is a Monday.
        let now = 1_796_040_000;
        assert_eq!(next_reset(ResetStrategy::Never, now), 0);
        assert_eq!(next_reset(ResetStrategy::Daily, now), 1_796_083_200); // 2026-12-01 00:00
        assert_eq!(next_reset(ResetStrategy::Weekly, now), 1_796_601_600); // Monday 2026-12-07
        assert_eq!(next_reset(ResetStrategy::Monthly, now), 1_796_083_200); // 2026-12-01
        assert_eq!(next_reset(ResetStrategy::Monthly, 1_796_083_200), 1_798_761_600); // 2027-01-01
        assert_eq!(next_reset(ResetStrategy::Rolling30, now), now + 30 * DAY);
        // At a boundary exactly, the next one is a full period away.
        assert_eq!(next_reset(ResetStrategy::Daily, 1_796_083_200), 1_796_083_200 + DAY);
    }
}
