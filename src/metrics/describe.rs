//! How a protocol's own metrics are named, measured and shown.
//!
//! A protocol lists its metrics as [`MetricDesc`]s in its registry entry; the run writes
//! them into `summary.json` as `protocol_metric_info` ([`MetricInfo`]), so the report (and a
//! report re-rendered from a merged summary) shows any protocol's metrics without naming it.

use serde::{Deserialize, Serialize};

/// Where the report puts a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Display {
    /// A highlight card (p50 large, p99 beside it), for the few figures read first.
    Card,
    /// A card plus its percentile distribution drawn as a chart.
    Chart,
    /// A row in the protocol metrics tables only.
    #[default]
    Table,
}

/// A protocol metric as the protocol declares it (static, in its registry entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDesc {
    /// Key under `protocol_metrics` (a histogram or a counter the protocol records).
    pub key: &'static str,
    /// Short name shown in the report, e.g. "ENet RTT".
    pub label: &'static str,
    /// One line on what it measures, shown under the figure.
    pub about: &'static str,
    /// `us` for times in microseconds (shown as µs/ms/s), `count`, or a display unit such
    /// as `tiles`.
    pub unit: &'static str,
    /// Recorded value = shown value × scale (prediction error is recorded in 1/1000 tile: 1000).
    pub scale: u32,
    /// Where the report shows it.
    pub display: Display,
    /// A counter that also reads as a rate per bot-minute (`<key>_per_bot_minute`).
    pub per_bot_minute: bool,
}

impl MetricDesc {
    /// A histogram of microseconds.
    pub const fn micros(key: &'static str, label: &'static str, about: &'static str) -> Self {
        Self {
            key,
            label,
            about,
            unit: "us",
            scale: 1,
            display: Display::Card,
            per_bot_minute: false,
        }
    }

    /// A histogram of values in `unit` (shown in the tables).
    pub const fn histogram(
        key: &'static str,
        label: &'static str,
        about: &'static str,
        unit: &'static str,
    ) -> Self {
        Self {
            key,
            label,
            about,
            unit,
            scale: 1,
            display: Display::Table,
            per_bot_minute: false,
        }
    }

    /// A counter.
    pub const fn count(key: &'static str, label: &'static str, about: &'static str) -> Self {
        Self {
            key,
            label,
            about,
            unit: "count",
            scale: 1,
            display: Display::Table,
            per_bot_minute: false,
        }
    }

    /// Shown as `d` instead of the constructor's default.
    pub const fn display(mut self, d: Display) -> Self {
        self.display = d;
        self
    }

    /// Shown in `unit`, the recorded value divided by `scale`.
    pub const fn unit(mut self, unit: &'static str, scale: u32) -> Self {
        self.unit = unit;
        self.scale = scale;
        self
    }

    /// Also shown per bot-minute (a counter).
    pub const fn per_bot_minute(mut self) -> Self {
        self.per_bot_minute = true;
        self
    }

    /// As written to `summary.json`.
    pub fn info(&self) -> MetricInfo {
        MetricInfo {
            label: self.label.into(),
            about: self.about.into(),
            unit: self.unit.into(),
            scale: self.scale,
            display: self.display,
            per_bot_minute: self.per_bot_minute,
        }
    }
}

/// A protocol metric's description as written to `summary.json` (`protocol_metric_info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricInfo {
    pub label: String,
    pub about: String,
    pub unit: String,
    pub scale: u32,
    pub display: Display,
    #[serde(default)]
    pub per_bot_minute: bool,
}

impl MetricInfo {
    /// Is this a time in microseconds?
    pub fn is_micros(&self) -> bool {
        self.unit == "us"
    }
}
