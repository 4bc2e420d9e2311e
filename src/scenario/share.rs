//! `share: 70%` (or `0.7`): a part of a whole, as a group's size and a reconnect storm's
//! sessions are written.

use serde::{Deserialize, Serialize};

/// `share: 70%` or `share: 0.7`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Share(pub f64);

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        let v = match Raw::deserialize(d)? {
            Raw::Num(v) => v,
            Raw::Text(t) => parse_share(&t).map_err(serde::de::Error::custom)?,
        };
        if !(v > 0.0 && v <= 1.0) {
            return Err(serde::de::Error::custom(format!(
                "share must be above 0 and at most 100% (or 1), got {v}"
            )));
        }
        Ok(Share(v))
    }
}

fn parse_share(t: &str) -> Result<f64, String> {
    let bad = || format!("share `{t}`: write a percentage (20%) or a fraction (0.2)");
    match t.trim().strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .map(|v| v / 100.0)
            .map_err(|_| bad()),
        None => t.trim().parse::<f64>().map_err(|_| bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_a_percentage_or_a_fraction() {
        assert_eq!(parse_share("20%"), Ok(0.2));
        assert_eq!(parse_share("0.2"), Ok(0.2));
        assert!(parse_share("x").is_err());
    }
}
