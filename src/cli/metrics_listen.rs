//! `run --metrics-listen ADDR`: Prometheus scrapes of the run in progress.
//!
//! `GET /metrics` gets the text the run published last (rendered once a second by
//! [`crate::report::prometheus::Exposition`], never per scrape), anything else a 404.
//! A reference server's endpoint (`serve --metrics-listen`, the embedded server of a run)
//! renders its counters on each scrape instead ([`MetricsServer::start_live`]): a copy of a
//! few counters and one histogram, cheap enough, and never older than the driver's last
//! 100 ms report.
//!
//! The endpoint is reachable by whoever can reach the port; what it holds is bounded as
//! [`super::http`] says (one thread, 32 connections with a quarter per address, one request
//! per connection, timed reads and writes).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::http::{self, Reply, Routes};

/// Content type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a scrape gets, rendered when it comes.
type Body = Box<dyn Fn() -> Arc<String> + Send + Sync>;

/// `GET /metrics`, and a 404 that says where the metrics are.
struct Scrape(Body);

impl Routes for Scrape {
    fn reply(&self, path: &str) -> Reply {
        if path == "/metrics" {
            Reply::ok(CONTENT_TYPE, (self.0)())
        } else {
            Reply::text("404 Not Found", "tickswarm: metrics are at /metrics\n")
        }
    }
}

pub struct MetricsServer {
    text: Arc<Mutex<Arc<String>>>,
    server: http::Server,
}

impl MetricsServer {
    /// Listen on `addr` (port 0 picks a free one; see [`MetricsServer::addr`]).
    pub fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let text = Arc::new(Mutex::new(Arc::new(String::new())));
        let published = text.clone();
        let body: Body = Box::new(move || published.lock().map(|t| t.clone()).unwrap_or_default());
        Self::start_with(addr, text, body)
    }

    /// Listen on `addr` and answer each scrape with what `render` returns then.
    pub fn start_live(
        addr: SocketAddr,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let text = Arc::new(Mutex::new(Arc::new(String::new())));
        Self::start_with(addr, text, Box::new(move || Arc::new(render())))
    }

    fn start_with(
        addr: SocketAddr,
        text: Arc<Mutex<Arc<String>>>,
        body: Body,
    ) -> anyhow::Result<Self> {
        let server = http::Server::start(
            addr,
            "--metrics-listen",
            http::MAX_PER_SOURCE,
            Arc::new(Scrape(body)),
        )?;
        Ok(Self { text, server })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// What scrapes get from now on.
    pub fn publish(&self, text: String) {
        if let Ok(mut t) = self.text.lock() {
            *t = Arc::new(text);
        }
    }
}
