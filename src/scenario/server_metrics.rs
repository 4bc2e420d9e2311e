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
    /// How long one scrape may take (connect, request, response); default: the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

impl ServerMetricsEndpoint {
    /// Whether this is the embedded server's own endpoint.
    pub fn is_embedded(&self) -> bool {
        self.url == "embedded"
    }

    /// The timeout of one scrape.
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(self.interval.0, |d| d.0)
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
