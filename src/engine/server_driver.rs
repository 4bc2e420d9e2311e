//! Runs a reference server state machine on a UDP socket in its own thread: the embedded
//! target of a swarm, and `tickswarm serve`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::udp::{RxBatch, Socket, TxBatch};
use crate::protocol::{Server, ServerStats};

/// A server running in a background thread.
pub struct ServerHandle {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    stats: Arc<Mutex<ServerStats>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The server's counters as of its last report (updated every 100 ms).
    pub fn stats(&self) -> ServerStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stop the server and wait for its thread.
    pub fn shutdown(mut self) -> ServerStats {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Bind `bind` and serve in a new thread. `make` builds the state machine in that thread.
pub fn spawn_server(
    bind: SocketAddr,
    make: impl FnOnce(Instant) -> Box<dyn Server> + Send + 'static,
) -> std::io::Result<ServerHandle> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stats = Arc::new(Mutex::new(ServerStats::default()));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let stats2 = stats.clone();
    let thread = std::thread::Builder::new()
        .name("tickswarm-server".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = addr_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let sock = match Socket::bind(bind) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let _ = addr_tx.send(sock.local_addr());
                let server = make(Instant::now());
                serve_loop(sock, server, stop_rx, stats2).await;
            });
        })?;
    let addr = addr_rx
        .recv()
        .map_err(|_| std::io::Error::other("server thread died before binding"))??;
    Ok(ServerHandle {
        addr,
        stop: stop_tx,
        stats,
        thread: Some(thread),
    })
}

async fn serve_loop(
    sock: Socket,
    mut server: Box<dyn Server>,
    mut stop: watch::Receiver<bool>,
    stats: Arc<Mutex<ServerStats>>,
) {
    let mut rx = RxBatch::new();
    let mut tx = TxBatch::new();
    let mut next_report = Instant::now();
    loop {
        let wake = server
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(100));
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = sock.io.readable() => {
                if r.is_err() {
                    break;
                }
                loop {
                    match sock.try_recv_batch(&mut rx) {
                        Ok(n) => {
                            let now = Instant::now();
                            for (from, d) in rx.datagrams(n) {
                                server.handle_datagram(now, from, d);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        // ICMP errors from departed clients and the like: not fatal.
                        Err(_) => continue,
                    }
                }
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                server.handle_timeout(Instant::now());
            }
        }
        flush(&sock, server.as_mut(), &mut tx).await;
        let now = Instant::now();
        if now >= next_report {
            next_report = now + Duration::from_millis(100);
            if let Ok(mut s) = stats.lock() {
                *s = server.stats().clone();
            }
        }
    }
    if let Ok(mut s) = stats.lock() {
        *s = server.stats().clone();
    }
}

/// Send everything the server has queued, in `sendmmsg` batches.
async fn flush(sock: &Socket, server: &mut dyn Server, batch: &mut TxBatch) {
    while let Some((to, t)) = server.poll_transmit(batch.next_buf()) {
        batch.push(to, t.len);
        if batch.is_full() && batch.flush(sock).await.is_err() {
            return;
        }
    }
    if !batch.is_empty() {
        let _ = batch.flush(sock).await;
    }
}
