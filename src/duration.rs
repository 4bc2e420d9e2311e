//! Durations as scenarios write them: `15s`, `500ms`, `2m`, `1.5s`, `250us`, `1h`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// A duration that deserializes from a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

/// Parse `<number><unit>` with unit one of `us`/`µs`, `ms`, `s`, `m`, `h`.
///
/// ```
/// use std::time::Duration;
/// use tickswarm::scenario::parse_duration;
///
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
/// assert!(parse_duration("15").is_err()); // a unit is required
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{t}` has no unit; write e.g. 15s, 500ms or 2m"))?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{t}` is not a duration; write e.g. 15s, 500ms or 2m"))?;
    let secs = match unit.trim() {
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{t}`; use us, ms, s, m or h"
            ))
        }
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("`{t}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Human form for plans and reports: `15s`, `500ms`, `1.5s`.
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us == 0 {
        "0s".into()
    } else if us % 1_000_000 == 0 {
        format!("{}s", us / 1_000_000)
    } else if us >= 1_000_000 {
        let n = format!("{:.3}", d.as_secs_f64());
        format!("{}s", n.trim_end_matches('0').trim_end_matches('.'))
    } else if us % 1000 == 0 {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 15s, 500ms or 2m")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "`{v}` has no unit; write e.g. {v}s or {v}ms"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                self.visit_u64(v.unsigned_abs())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                Err(E::custom(format!("`{v}` has no unit; write e.g. {v}s")))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("15 parsecs").is_err());
        assert!(parse_duration("abc").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for s in ["15s", "500ms", "1.5s", "250us"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
