//! Literals CQL writes as strings: dates (`'2026-11-30'`) and
//! timestamps (`'2026-11-30 12:00:00+0000'`), as Cassandra reads them,
//! and written back the same way.

/// Days from 1970-01-01 to the date `y-m-d` of the proleptic Gregorian
/// calendar (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `(y, m, d)` `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A `date` cell's value (days centered at 2^31) as `yyyy-mm-dd`.
pub(crate) fn date_text(value: u32) -> String {
    let (y, m, d) = civil_from_days(i64::from(value) - (1 << 31));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Ms since the epoch as `yyyy-mm-dd HH:MM:SS.fff+0000`, as `cqlsh`
/// prints a timestamp (with its milliseconds).
pub(crate) fn timestamp_text(ms: i64) -> String {
    let (day, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(day);
    let (s, frac) = (in_day / 1000, in_day % 1000);
    let (h, min, sec) = (s / 3600, s / 60 % 60, s % 60);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{sec:02}.{frac:03}+0000")
}

/// `HH:MM:SS[.fffffffff]` as ns since midnight.
pub(crate) fn time_ns(s: &str) -> Option<i64> {
    let (hms, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
    let mut fields = hms.split(':');
    let h: i64 = fields.next()?.parse().ok()?;
    let m: i64 = fields.next()?.parse().ok()?;
    let sec: i64 = fields.next()?.parse().ok()?;
    if fields.next().is_some() || h > 23 || m > 59 || sec > 59 || frac.len() > 9 {
        return None;
    }
    let frac_ns = match frac {
        "" => 0,
        f => f.parse::<i64>().ok()? * 10i64.pow(9 - f.len() as u32),
    };
    Some(((h * 60 + m) * 60 + sec) * 1_000_000_000 + frac_ns)
}

/// Ns since midnight as `HH:MM:SS.fffffffff`, as `cqlsh` prints a time.
pub(crate) fn time_text(ns: i64) -> String {
    let (s, frac) = (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    format!("{:02}:{:02}:{:02}.{frac:09}", s / 3600, s / 60 % 60, s % 60)
}

/// A varint's decimal, for one of at most 16 bytes.
pub(crate) fn varint_text(v: &[u8]) -> Option<String> {
    if v.is_empty() || v.len() > 16 {
        return None;
    }
    let fill = if v[0] & 0x80 != 0 { 0xFF } else { 0 };
    let mut be = [fill; 16];
    be[16 - v.len()..].copy_from_slice(v);
    Some(i128::from_be_bytes(be).to_string())
}

/// An integer as a varint: big-endian two's complement, in the fewest
/// bytes.
pub(crate) fn varint(i: i128) -> Vec<u8> {
    let bytes = i.to_be_bytes();
    let fill = if i < 0 { 0xFF } else { 0 };
    let skip = bytes
        .windows(2)
        .take_while(|w| w[0] == fill && (w[1] & 0x80 == fill & 0x80))
        .count();
    bytes[skip..].to_vec()
}

/// `yyyy-mm-dd` as days since 1970-01-01.
pub(crate) fn days(s: &str) -> Option<i64> {
    let mut parts = s.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    let month_days = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let fits = (1..=12).contains(&m) && d >= 1 && d <= month_days[(m - 1) as usize];
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    (fits && !(m == 2 && d == 29 && !leap)).then(|| days_from_civil(y, m, d))
}

/// A `date` cell's value: days since the epoch, centered at 2^31.
pub(crate) fn date(days: i64) -> Option<u32> {
    u32::try_from(days + (1 << 31)).ok()
}

/// `yyyy-mm-dd[( |T)HH:MM[:SS[.fff]]][Z|(+|-)HHMM]` as ms since the epoch
/// (no zone: UTC).
pub(crate) fn timestamp_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, rest) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s.get(..10)?, s.get(10..)?),
    };
    let day_ms = days(date)? * 86_400_000;
    let zone_at = rest.rfind(['+', '-', 'Z']).unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let mut ms = 0i64;
    if !time.is_empty() {
        let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
        let mut fields = hms.split(':');
        let h: i64 = fields.next()?.parse().ok()?;
        let m: i64 = fields.next()?.parse().ok()?;
        let sec: i64 = fields.next().map_or(Some(0), |x| x.parse().ok())?;
        let frac_ms: i64 = match frac.len() {
            0 => 0,
            1..=3 => frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32),
            _ => return None,
        };
        if h > 23 || m > 59 || sec > 59 {
            return None;
        }
        ms = ((h * 60 + m) * 60 + sec) * 1000 + frac_ms;
    }
    let offset_ms = match zone {
        "" | "Z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits: String = z[1..].chars().filter(char::is_ascii_digit).collect();
            if digits.len() != 4 {
                return None;
            }
            let (h, m): (i64, i64) = (digits[..2].parse().ok()?, digits[2..].parse().ok()?);
            sign * (h * 60 + m) * 60_000
        }
    };
    Some(day_ms + ms - offset_ms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn dates_and_timestamps_read_as_cassandra_reads_them() {
        assert_eq!(days("1970-01-01"), Some(0));
        assert_eq!(days("2026-11-30"), Some(20_787));
        assert_eq!(days("1969-12-31"), Some(-1));
        assert_eq!(days("2025-02-29"), None);
        assert_eq!(days("2024-02-29"), Some(19_782));
        assert_eq!(date(0), Some(1 << 31));
        assert_eq!(timestamp_ms("1970-01-01"), Some(0));
        assert_eq!(timestamp_ms("1970-01-01 00:00:01.5"), Some(1_500));
        assert_eq!(timestamp_ms("1970-01-01T01:00:00+0100"), Some(0));
        assert_eq!(
            timestamp_ms("2026-11-30 12:00:00Z"),
            Some(20_787 * 86_400_000 + 43_200_000)
        );
        assert_eq!(timestamp_ms("2026-11-30 25:00"), None);
        assert_eq!(timestamp_ms("nope"), None);
    }

    #[test]
    fn dates_and_timestamps_write_back_as_they_read() {
        for d in [
            "1970-01-01",
            "1969-12-31",
            "2024-02-29",
            "2026-11-30",
            "0001-01-01",
        ] {
            let value = date(days(d).unwrap()).unwrap();
            assert_eq!(date_text(value), d);
        }
        for ms in [0, 1_500, -1, 1_796_083_200_123, -62_135_596_800_000] {
            assert_eq!(timestamp_ms(&timestamp_text(ms)), Some(ms), "{ms}");
        }
        assert_eq!(timestamp_text(1_500), "1970-01-01 00:00:01.500+0000");
    }

    #[test]
    fn times_and_varints_read_as_cassandra_reads_them() {
        assert_eq!(time_ns("00:00:01"), Some(1_000_000_000));
        assert_eq!(time_ns("23:59:59.999999999"), Some(86_399_999_999_999));
        assert_eq!(time_ns("08:12:54.123"), Some(29_574_123_000_000));
        assert_eq!(time_ns("24:00:00"), None);
        assert_eq!(varint(0), [0]);
        assert_eq!(varint(127), [0x7F]);
        assert_eq!(varint(128), [0, 0x80]);
        assert_eq!(varint(-1), [0xFF]);
        assert_eq!(varint(-128), [0x80]);
        assert_eq!(varint(-129), [0xFF, 0x7F]);
        for i in [0, 1, -1, 127, 128, -128, -129, i128::from(i64::MAX) * 3] {
            assert_eq!(varint_text(&varint(i)), Some(i.to_string()));
        }
        assert_eq!(time_text(29_574_123_000_000), "08:12:54.123000000");
    }
}
