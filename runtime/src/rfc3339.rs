//! RFC 3339 date-times to Unix milliseconds: how a key spec reads a timestamp key stored as
//! text. A parser of its own, so the runtime needs no date crate.

/// Why a text is not an RFC 3339 date-time.
///
/// ```
/// assert!(natural_key::spec::rfc3339_millis("2024-02-30T00:00:00Z").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an RFC 3339 date-time ({problem}); write e.g. 2024-03-01T09:30:00.123Z")]
pub struct Rfc3339Error {
    text: String,
    problem: &'static str,
}

/// The instant of an RFC 3339 date-time (`2024-03-01T09:30:00.123Z`, `...+02:00`) in Unix
/// milliseconds, fraction floored as for every timestamp key (docs/id-scheme.md). `T` may be
/// `t` or a space; the offset is `Z`, `z` or `±hh:mm`; a leap second (`:60`) is refused.
///
/// ```
/// use natural_key::spec::rfc3339_millis;
/// assert_eq!(rfc3339_millis("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
/// assert_eq!(rfc3339_millis("2023-11-14T23:13:20.1239+01:00"), Ok(1_700_000_000_123));
/// assert_eq!(rfc3339_millis("1969-12-31T23:59:59.9995Z"), Ok(-1)); // floored, not truncated
/// ```
pub fn rfc3339_millis(text: &str) -> Result<i128, Rfc3339Error> {
    let err = |problem| Rfc3339Error {
        text: text.to_string(),
        problem,
    };
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        digits.iter().all(u8::is_ascii_digit).then(|| {
            digits
                .iter()
                .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'))
        })
    };
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if b.len() < 20
        || !at(4, b"-")
        || !at(7, b"-")
        || !at(10, b"Tt ")
        || !at(13, b":")
        || !at(16, b":")
    {
        return Err(err("not YYYY-MM-DDThh:mm:ss"));
    }
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    ) else {
        return Err(err("not YYYY-MM-DDThh:mm:ss"));
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(err("month out of range")),
    };
    if !(1..=days_in_month).contains(&day) {
        return Err(err("day out of range"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(err("time out of range (leap seconds are not taken)"));
    }
    let (nanos, i) = fraction(b, 19).ok_or_else(|| err("no digits after `.`"))?;
    let offset_minutes = match b.get(i..) {
        Some(b"Z" | b"z") => 0,
        Some([sign @ (b'+' | b'-'), ..]) if b.len() == i + 6 && at(i + 3, b":") => {
            let (Some(h), Some(m)) = (num(i + 1..i + 3), num(i + 4..i + 6)) else {
                return Err(err("bad offset"));
            };
            if h > 23 || m > 59 {
                return Err(err("offset out of range"));
            }
            if *sign == b'+' {
                h * 60 + m
            } else {
                -(h * 60 + m)
            }
        }
        _ => return Err(err("no offset: end with Z or ±hh:mm")),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    let total_nanos = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    Ok(total_nanos.div_euclid(1_000_000))
}

/// Days from 1970-01-01 to a civil date of the proleptic Gregorian calendar (H. Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The nanoseconds of an optional `.digits` fraction at `i` (digits past the ninth are
/// dropped: the floor to milliseconds does not see them), and where the text goes on; `None`
/// for a `.` without digits.
fn fraction(b: &[u8], mut i: usize) -> Option<(i64, usize)> {
    if b.get(i) != Some(&b'.') {
        return Some((0, i));
    }
    let start = i + 1;
    i = start;
    let mut nanos: i64 = 0;
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        if i - start < 9 {
            nanos = nanos * 10 + i64::from(b[i] - b'0');
        }
        i += 1;
    }
    if i == start {
        return None;
    }
    for _ in (i - start)..9 {
        nanos *= 10;
    }
    Some((nanos, i))
}
