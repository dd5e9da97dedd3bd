//! mongoimport's `date(LAYOUT)` columns: Go's reference-time layouts (`2006-01-02 15:04:05`),
//! the part of them that reads a date unambiguously — numeric year, month, day, 24-hour time,
//! a fraction of a second and a numeric zone. A layout with more (month names, a 12-hour
//! clock, a zone's name) is refused when the header is read, not guessed at.

/// One element of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    /// `.000` or `.999`: a fraction of a second.
    Fraction,
    /// `Z07:00` (`Z` for UTC) or `-07:00`: `colon` whether it is `±hh:mm` or `±hhmm`.
    Zone {
        z: bool,
        colon: bool,
    },
    /// Any other character, read as itself.
    Literal(char),
}

/// A parsed layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    parts: Vec<Part>,
}

/// The layout elements in the order they are tried: the longest first.
const ELEMENTS: [(&str, Part); 10] = [
    ("2006", Part::Year),
    (
        "Z07:00",
        Part::Zone {
            z: true,
            colon: true,
        },
    ),
    (
        "Z0700",
        Part::Zone {
            z: true,
            colon: false,
        },
    ),
    (
        "-07:00",
        Part::Zone {
            z: false,
            colon: true,
        },
    ),
    (
        "-0700",
        Part::Zone {
            z: false,
            colon: false,
        },
    ),
    ("01", Part::Month),
    ("02", Part::Day),
    ("15", Part::Hour),
    ("04", Part::Minute),
    ("05", Part::Second),
];

const SUPPORTED: &str = "2006 01 02 15 04 05, a fraction (.000 or .999), a zone (Z07:00, \
                         -07:00, Z0700, -0700), T and punctuation";

impl Layout {
    pub(crate) fn parse(layout: &str) -> Result<Layout, String> {
        let mut parts = Vec::new();
        let mut rest = layout;
        'next: while let Some(c) = rest.chars().next() {
            for (text, part) in &ELEMENTS {
                if let Some(after) = rest.strip_prefix(text) {
                    parts.push(part.clone());
                    rest = after;
                    continue 'next;
                }
            }
            if matches!(c, '.' | ',') {
                let digit = rest
                    .as_bytes()
                    .get(1)
                    .copied()
                    .filter(|&b| b == b'0' || b == b'9');
                let run = rest[1..].bytes().take_while(|&b| Some(b) == digit).count();
                if run > 0 {
                    parts.push(Part::Fraction);
                    rest = &rest[1 + run..];
                    continue;
                }
            }
            if c.is_ascii_alphanumeric() && c != 'T' {
                return Err(format!(
                    "date layout `{layout}`: `{}` is not read here (only {SUPPORTED})",
                    rest.chars().take(8).collect::<String>()
                ));
            }
            parts.push(Part::Literal(c));
            rest = &rest[c.len_utf8()..];
        }
        if !parts.contains(&Part::Year) {
            return Err(format!("date layout `{layout}` has no year (2006)"));
        }
        Ok(Layout { parts })
    }

    /// `text` read by the layout: Unix milliseconds (UTC where it names no zone).
    pub(crate) fn read(&self, text: &str) -> Result<i64, String> {
        let mut fields = [0i64, 1, 1, 0, 0, 0];
        let (mut millis, mut offset_minutes) = (0i64, 0i64);
        let mut rest = text.as_bytes();
        for (i, part) in self.parts.iter().enumerate() {
            let slot = match part {
                Part::Year => Some((0, 4, 0, 9999)),
                Part::Month => Some((1, 2, 1, 12)),
                Part::Day => Some((2, 2, 1, 31)),
                Part::Hour => Some((3, 2, 0, 23)),
                Part::Minute => Some((4, 2, 0, 59)),
                Part::Second => Some((5, 2, 0, 59)),
                _ => None,
            };
            if let Some((index, width, min, max)) = slot {
                fields[index] = number(&mut rest, width, min, max)?;
                // Go reads a fraction after the seconds even where the layout has none.
                let fraction_next = self.parts.get(i + 1) == Some(&Part::Fraction);
                if *part == Part::Second && !fraction_next && rest.first() == Some(&b'.') {
                    millis = fraction(&mut rest)?;
                }
                continue;
            }
            match part {
                Part::Fraction => millis = fraction(&mut rest)?,
                Part::Zone { z, colon } => offset_minutes = zone(&mut rest, *z, *colon)?,
                Part::Literal(c) => {
                    let mut buf = [0; 4];
                    let want = c.encode_utf8(&mut buf).as_bytes();
                    rest = rest
                        .strip_prefix(want)
                        .ok_or("it does not fit the layout")?;
                }
                _ => {}
            }
        }
        if !rest.is_empty() {
            return Err("more than the layout holds".into());
        }
        let [year, month, day, hour, minute, second] = fields;
        if day > days_in_month(year, month) {
            return Err(format!("{year}-{month:02} has no day {day}"));
        }
        // Every field is in range here: `number` bounds each, `days_in_month` the day.
        let local = natural_key_runtime::bson::DateTime::builder()
            .year(year as i32)
            .month(month as u8)
            .day(day as u8)
            .hour(hour as u8)
            .minute(minute as u8)
            .second(second as u8)
            .millisecond(millis as u16)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(local.timestamp_millis() - offset_minutes * 60_000)
    }
}

/// `width` digits, between `min` and `max`.
fn number(rest: &mut &[u8], width: usize, min: i64, max: i64) -> Result<i64, String> {
    let digits = rest
        .get(..width)
        .filter(|d| d.iter().all(u8::is_ascii_digit));
    let digits = digits.ok_or_else(|| format!("{width} digits expected"))?;
    let n = digits
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    *rest = &rest[width..];
    match (min..=max).contains(&n) {
        true => Ok(n),
        false => Err(format!("{n} is out of range ({min} to {max})")),
    }
}

/// `.ddd...` (or `,ddd`): milliseconds, the digits past the third dropped (floored, as ids
/// floor a timestamp).
fn fraction(rest: &mut &[u8]) -> Result<i64, String> {
    let after = rest.get(1..).unwrap_or_default();
    let n = after.iter().take_while(|b| b.is_ascii_digit()).count();
    if !matches!(rest.first(), Some(b'.' | b',')) || n == 0 {
        return Err("a fraction of a second expected".into());
    }
    let ms = after[..n.min(3)]
        .iter()
        .chain(std::iter::repeat(&b'0'))
        .take(3)
        .fold(0i64, |m, d| m * 10 + i64::from(d - b'0'));
    *rest = &after[n..];
    Ok(ms)
}

/// `Z` (with `z`), or `±hh:mm` / `±hhmm`: the offset east of UTC in minutes.
fn zone(rest: &mut &[u8], z: bool, colon: bool) -> Result<i64, String> {
    if z && rest.first() == Some(&b'Z') {
        *rest = &rest[1..];
        return Ok(0);
    }
    let sign = match rest.first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err("a zone (+hh:mm, -hh:mm or Z) expected".into()),
    };
    *rest = &rest[1..];
    let hours = number(rest, 2, 0, 23)?;
    if colon {
        *rest = rest.strip_prefix(b":").ok_or("a zone's `:` expected")?;
    }
    let minutes = number(rest, 2, 0, 59)?;
    Ok(sign * (hours * 60 + minutes))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natural_key_runtime::bson::DateTime;

    fn ms(layout: &str, text: &str) -> Result<i64, String> {
        Layout::parse(layout)?.read(text)
    }

    fn rfc3339(text: &str) -> i64 {
        DateTime::parse_rfc3339_str(text)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn layouts_read_as_go_reads_them() {
        assert_eq!(
            ms("2006-01-02", "2024-02-29").unwrap(),
            rfc3339("2024-02-29T00:00:00Z")
        );
        assert_eq!(
            ms("2006-01-02 15:04:05", "2023-11-14 22:13:20").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            ms(
                "2006-01-02T15:04:05Z07:00",
                "2023-11-15T00:13:20.123456+02:00"
            )
            .unwrap(),
            1_700_000_000_123,
            "a fraction after the seconds is read though the layout has none"
        );
        assert_eq!(
            ms("2006-01-02T15:04:05.000Z07:00", "2023-11-14T22:13:20.5Z").unwrap(),
            1_700_000_000_500
        );
        assert_eq!(
            ms("02/01/2006 15:04 -0700", "14/11/2023 17:13 -0500").unwrap(),
            1_700_000_000_000 - 20_000
        );
        assert_eq!(ms("2006-01-02", "1969-12-31").unwrap(), -86_400_000);
    }

    #[test]
    fn text_that_does_not_fit_and_layouts_with_more_are_refused() {
        for (layout, text) in [
            ("2006-01-02", "2024-02-30"),
            ("2006-01-02", "2023-02-29"),
            ("2006-01-02", "2024-13-01"),
            ("2006-01-02", "2024-1-01"),
            ("2006-01-02", "2024-01-01 "),
            ("2006-01-02 15:04", "2024-01-01 24:00"),
            ("2006-01-02Z07:00", "2024-01-01+0100"),
        ] {
            assert!(ms(layout, text).is_err(), "{layout} {text}");
        }
        for layout in [
            "Jan 2, 2006",
            "2006-01-02 03:04PM",
            "2006-01-02 MST",
            "01/02",
        ] {
            assert!(Layout::parse(layout).is_err(), "{layout}");
        }
    }

    #[test]
    fn dates_agree_with_rfc3339() {
        for text in [
            "1970-01-01",
            "2000-02-29",
            "1900-03-01",
            "2400-12-31",
            "0001-01-01",
        ] {
            assert_eq!(
                ms("2006-01-02", text),
                Ok(rfc3339(&format!("{text}T00:00:00Z"))),
                "{text}"
            );
        }
    }
}
