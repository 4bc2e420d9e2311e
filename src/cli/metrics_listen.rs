//! `run --metrics-listen ADDR`: Prometheus scrapes of the run in progress.
//!
//! One thread answers HTTP on `ADDR`: `GET /metrics` gets the text the run published last
//! (rendered once a second by [`crate::report::prometheus::Exposition`], never per scrape),
//! anything else a 404. The thread ends when the server is dropped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::Context;

/// Content type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    text: Arc<Mutex<String>>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Listen on `addr` (port 0 picks a free one; see [`MetricsServer::addr`]).
    pub fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("--metrics-listen: cannot listen on {addr}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .context("--metrics-listen: not an IP listener")?;
        let server = Arc::new(server);
        let text = Arc::new(Mutex::new(String::new()));
        let thread = {
            let (server, text) = (server.clone(), text.clone());
            std::thread::Builder::new()
                .name("metrics-listen".into())
                .spawn(move || serve(&server, &text))
                .context("--metrics-listen: starting its thread")?
        };
        Ok(Self {
            server,
            text,
            thread: Some(thread),
            addr,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What scrapes get from now on.
    pub fn publish(&self, text: String) {
        if let Ok(mut t) = self.text.lock() {
            *t = text;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &tiny_http::Server, text: &Mutex<String>) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let response = if path == "/metrics" {
            let body = text.lock().map(|t| t.clone()).unwrap_or_default();
            let header = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE)
                .expect("a constant, valid header");
            tiny_http::Response::from_string(body).with_header(header)
        } else {
            tiny_http::Response::from_string("tickswarm: metrics are at /metrics\n")
                .with_status_code(404)
        };
        // A scraper that went away is not the run's problem.
        let _ = request.respond(response);
    }
}
