//! `capacity:`: how `tickswarm capacity` searches for the most players a server holds.
//!
//! The scenario's thresholds are the objectives; this block says how the population grows
//! (from `start`, doubling or by a fixed `step`, up to `max_players`), how long each step is
//! held (`settle` after its ramp, then a judged `window`), how precise the answer must be
//! (`resolution`) and how long the whole search may take (`time_budget`). Every setting is
//! checked where it is read, so a mistake is reported at its own line and column.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;

/// How the population grows between steps until one breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Each step twice the last (the default): the edge is found in log2(max/start) steps.
    Double,
    /// Each step this many players more than the last.
    By(u64),
}

impl Serialize for Growth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Growth::Double => s.serialize_str("double"),
            Growth::By(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Growth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(0) => Err(serde::de::Error::custom(
                "capacity.step must be `double` or a number of players above 0",
            )),
            Raw::N(n) => Ok(Growth::By(n)),
            Raw::S(s) if s == "double" => Ok(Growth::Double),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "capacity.step must be `double` or a number of players, not `{s}`"
            ))),
        }
    }
}

/// The `capacity:` block, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CapacityRaw")]
pub struct CapacitySection {
    /// Players of the first step.
    pub start: u64,
    /// How the population grows until a step breaks.
    pub step: Growth,
    /// Never more players than this (a cap that always holds).
    pub max_players: u64,
    /// The answer's precision: the search narrows until the last step that held and the first
    /// that broke are at most this share apart (0.05 for `5%`).
    pub resolution: f64,
    /// After a step's ramp, wait this long before its window (the server settles).
    pub settle: Dur,
    /// The span each step is judged on.
    pub window: Dur,
    /// Round-trip samples a window must hold for its bot-side figures to be judged.
    pub min_samples: u64,
    /// The whole search's time; the search says so when it ends early for it.
    pub time_budget: Dur,
}

impl Default for CapacitySection {
    fn default() -> Self {
        Self {
            start: 10,
            step: Growth::Double,
            max_players: 1000,
            resolution: 0.05,
            settle: Dur(Duration::from_secs(3)),
            window: Dur(Duration::from_secs(10)),
            min_samples: 100,
            time_budget: Dur(Duration::from_secs(600)),
        }
    }
}

/// The keys as written, each checked on its own where it is read (so a mistake is reported
/// at its line); [`CapacitySection`] checks them together.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityRaw {
    #[serde(default, deserialize_with = "start")]
    start: Option<u64>,
    step: Option<Growth>,
    max_players: Option<u64>,
    #[serde(default, deserialize_with = "resolution")]
    resolution: Option<f64>,
    settle: Option<Dur>,
    #[serde(default, deserialize_with = "window")]
    window: Option<Dur>,
    min_samples: Option<u64>,
    time_budget: Option<Dur>,
}

fn start<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match u64::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "capacity.start must be at least 1 player",
        )),
        n => Ok(Some(n)),
    }
}

fn resolution<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(f64),
        S(String),
    }
    let text = match Raw::deserialize(d)? {
        Raw::N(v) => v.to_string(),
        Raw::S(s) => s,
    };
    parse_resolution(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn window<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Dur>, D::Error> {
    let w = Dur::deserialize(d)?;
    if w.0 < Duration::from_secs(1) {
        return Err(serde::de::Error::custom(format!(
            "capacity.window must be at least 1s (whole seconds are judged), got {}",
            super::format_duration(w.0)
        )));
    }
    Ok(Some(w))
}

/// `5%` (or `0.05`) as a share above 0 and below 1.
pub fn parse_resolution(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, pct) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (t, false),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("capacity.resolution `{s}` is not a share; write e.g. 5%"))?;
    let v = if pct { v / 100.0 } else { v };
    if !(v > 0.0 && v < 1.0) {
        return Err(format!(
            "capacity.resolution must be above 0% and below 100%, got `{s}`"
        ));
    }
    Ok(v)
}

impl TryFrom<CapacityRaw> for CapacitySection {
    type Error = String;
    fn try_from(r: CapacityRaw) -> Result<Self, String> {
        let d = CapacitySection::default();
        let c = CapacitySection {
            start: r.start.unwrap_or(d.start),
            step: r.step.unwrap_or(d.step),
            max_players: r.max_players.unwrap_or(d.max_players),
            resolution: r.resolution.unwrap_or(d.resolution),
            settle: r.settle.unwrap_or(d.settle),
            window: r.window.unwrap_or(d.window),
            min_samples: r.min_samples.unwrap_or(d.min_samples),
            time_budget: r.time_budget.unwrap_or(d.time_budget),
        };
        c.check()?;
        Ok(c)
    }
}

impl CapacitySection {
    /// The rules every setting must keep (also after command-line overrides).
    pub fn check(&self) -> Result<(), String> {
        if self.start == 0 {
            return Err("capacity.start must be at least 1 player".into());
        }
        if self.max_players < self.start {
            return Err(format!(
                "capacity.max_players ({}) is below capacity.start ({})",
                self.max_players, self.start
            ));
        }
        if self.window.0 < Duration::from_secs(1) {
            return Err(format!(
                "capacity.window must be at least 1s (whole seconds are judged), got {}",
                super::format_duration(self.window.0)
            ));
        }
        let step = self.settle.0 + self.window.0;
        if self.time_budget.0 < step {
            return Err(format!(
                "capacity.time_budget ({}) is shorter than one step (settle {} + window {})",
                super::format_duration(self.time_budget.0),
                super::format_duration(self.settle.0),
                super::format_duration(self.window.0)
            ));
        }
        Ok(())
    }

    /// The players of the step after `n` while growing, capped at `max_players`.
    pub fn grow(&self, n: u64) -> u64 {
        let next = match self.step {
            Growth::Double => n.saturating_mul(2),
            Growth::By(k) => n.saturating_add(k),
        };
        next.min(self.max_players)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<CapacitySection, String> {
        serde_saphyr::from_str::<CapacitySection>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_a_full_block() {
        assert_eq!(parse("{}").unwrap(), CapacitySection::default());
        let c = parse(
            "start: 50\nstep: 25\nmax_players: 800\nresolution: 2.5%\nsettle: 2s\n\
             window: 8s\nmin_samples: 40\ntime_budget: 6m\n",
        )
        .unwrap();
        assert_eq!((c.start, c.step, c.max_players), (50, Growth::By(25), 800));
        assert_eq!(c.resolution, 0.025);
        assert_eq!(c.window.0, Duration::from_secs(8));
        assert_eq!(c.grow(790), 800);
    }

    #[test]
    fn bad_settings_are_refused_with_what_to_write() {
        for (yaml, says) in [
            ("resolution: 0%", "above 0% and below 100%"),
            ("resolution: fast", "not a share"),
            ("start: 100\nmax_players: 50", "below capacity.start"),
            ("start: 0", "at least 1 player"),
            ("step: triple", "`double` or a number"),
            ("step: 0", "above 0"),
            ("window: 500ms", "at least 1s"),
            ("time_budget: 5s", "shorter than one step"),
            ("windows: 5s", "unknown field"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert!(e.contains(says), "{yaml}: {e}");
        }
    }

    #[test]
    fn a_mistake_names_its_own_line() {
        let e = parse("start: 10\nresolution: 0%\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = parse("start: 10\nsettle: 1s\nwindow: 0s\n").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
    }
}
