//! `server_metrics:`: the target's own Prometheus endpoints, scraped during the run so the
//! report shows the server's figures (tick time, memory, sessions) on the run's time axis.
//!
//! ```yaml
//! server_metrics:
//!   - url: embedded                 # the embedded reference server's own /metrics
//!   - url: http://10.0.0.5:9100/metrics
//!     auth_header_env: METRICS_AUTH # its value is sent as the Authorization header
//!     interval: 1s                  # default 1s
//!     timeout: 500ms                # default: the interval
//!     series: [process_resident_memory_bytes, game_tick_seconds]
//!     shard: 0                      # the shard that scrapes it in a sharded run (default 0)
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;

/// Series stored per endpoint when the scenario names none: the first this many families
/// of the first scrape, by name (a node exporter exposes thousands).
pub const MAX_SERIES_PER_ENDPOINT: usize = 64;

/// The longest `timeout:` of one scrape. Prometheus' own default scrape timeout is 10 s, and a
/// `/metrics` page that takes longer is not one to sample every second; the cap bounds how
/// long a hung endpoint can hold a scraper thread (and the process's exit) after the run.
/// Before it, `timeout: 1000000000s` made a run that never ended.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);

/// The most endpoints one shard scrapes: each is a thread and up to
/// 4 MiB of body in flight (src/cli/scrape.rs), so 32 is at most 32 threads and 128 MiB at
/// once. 20,000 endpoints passed `validate` and then ran out of threads; a fleet larger than
/// 32 servers per load machine is Prometheus' to scrape, or spread over shards with
/// `shard:`.
pub const MAX_ENDPOINTS_PER_SHARD: usize = 32;

/// One endpoint to scrape.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerMetricsEndpoint {
    /// `embedded` (the embedded reference server's endpoint, on an ephemeral loopback port),
    /// or an `http://host:port/path` URL (plain HTTP; no TLS).
    pub url: String,
    /// The name of an environment variable whose value is sent as the `Authorization`
    /// header (e.g. `Bearer ...`); read when the run starts, never written to a report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_header_env: Option<String>,
    #[serde(default = "one_second")]
    pub interval: Dur,
    /// How long one scrape may take (connect, request, response), at most [`MAX_TIMEOUT`]
    /// (checked where it is read, so the error names its line); default: the interval, up to
    /// [`MAX_TIMEOUT`].
    #[serde(
        default,
        deserialize_with = "capped_timeout",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Dur>,
    /// Metric family names to store; empty: every family, up to [`MAX_SERIES_PER_ENDPOINT`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<String>,
    /// In a sharded run, the shard that scrapes this endpoint (the others do not).
    #[serde(default)]
    pub shard: u32,
}

fn one_second() -> Dur {
    Dur(Duration::from_secs(1))
}

/// `timeout:`, refused above [`MAX_TIMEOUT`] at its own line and column.
fn capped_timeout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Dur>, D::Error> {
    let t = Option::<Dur>::deserialize(d)?;
    match t {
        Some(Dur(t)) if t > MAX_TIMEOUT => Err(serde::de::Error::custom(format!(
            "server_metrics timeout {} is above the most a scrape may take, {}",
            crate::duration::format_duration(t),
            crate::duration::format_duration(MAX_TIMEOUT)
        ))),
        t => Ok(t),
    }
}

/// `server_metrics:` as a whole: at most [`MAX_ENDPOINTS_PER_SHARD`] endpoints for any one
/// shard, refused where the list is read (so the error names its line and column).
pub fn endpoints<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<ServerMetricsEndpoint>, D::Error> {
    let list = Vec::<ServerMetricsEndpoint>::deserialize(d)?;
    let mut per_shard = std::collections::BTreeMap::<u32, usize>::new();
    for e in &list {
        *per_shard.entry(e.shard).or_insert(0) += 1;
    }
    if let Some((shard, n)) = per_shard
        .into_iter()
        .find(|&(_, n)| n > MAX_ENDPOINTS_PER_SHARD)
    {
        return Err(serde::de::Error::custom(format!(
            "server_metrics: {n} endpoints for shard {shard}, at most {MAX_ENDPOINTS_PER_SHARD} \
             (one scraper thread each); spread them over shards with `shard:`"
        )));
    }
    Ok(list)
}

impl ServerMetricsEndpoint {
    /// Whether this is the embedded server's own endpoint.
    pub fn is_embedded(&self) -> bool {
        self.url == "embedded"
    }

    /// The timeout of one scrape: as written, else the interval, never above [`MAX_TIMEOUT`].
    pub fn timeout(&self) -> Duration {
        self.timeout
            .map_or(self.interval.0, |d| d.0)
            .min(MAX_TIMEOUT)
    }

    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.interval.0 < Duration::from_millis(100) {
            return Err(format!(
                "server_metrics `{}`: interval must be at least 100ms",
                self.url
            ));
        }
        if self.timeout().is_zero() {
            return Err(format!(
                "server_metrics `{}`: timeout must be above 0",
                self.url
            ));
        }
        if !self.is_embedded() && !self.url.starts_with("http://") {
            return Err(format!(
                "server_metrics `{}`: expected `embedded` or an http:// URL (https is not supported)",
                self.url
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let e: ServerMetricsEndpoint = serde_saphyr::from_str("url: embedded\n").unwrap();
        assert!(e.is_embedded());
        assert_eq!(e.interval.0, Duration::from_secs(1));
        assert_eq!(e.timeout(), Duration::from_secs(1));
        assert_eq!(e.check(), Ok(()));
        let e: ServerMetricsEndpoint =
            serde_saphyr::from_str("url: https://x/metrics\ninterval: 50ms\n").unwrap();
        assert!(e.check().unwrap_err().contains("at least 100ms"));
        let e: ServerMetricsEndpoint = serde_saphyr::from_str("url: https://x/metrics\n").unwrap();
        assert!(e.check().unwrap_err().contains("https is not supported"));
    }
}
