//! A user-space impairment proxy for end-to-end tests on loopback (a tiny netem): bots talk
//! to the proxy, the proxy talks to the server with one upstream socket per bot, and it
//! delays every datagram by a fixed one-way time and drops exactly every K-th datagram from
//! the server to each bot. It counts what it dropped, so tests compare against ground truth.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Mutex;

#[derive(Debug, Clone, Copy, Default)]
pub struct Impairment {
    /// Added to every datagram, each direction.
    pub one_way_delay: Duration,
    /// Drop every K-th server-to-bot datagram, per bot (0 = never).
    pub drop_every_down: u64,
    /// Drop every K-th bot-to-server datagram, per bot (0 = never).
    pub drop_every_up: u64,
    /// Flip the first byte of every K-th server-to-bot datagram, per bot (0 = never).
    pub corrupt_every_down: u64,
}

#[derive(Debug, Default)]
pub struct ProxyCounts {
    /// Datagrams (and their bytes) that arrived from the bots, dropped ones included.
    pub up_received: AtomicU64,
    pub up_received_bytes: AtomicU64,
    /// Bytes of the datagrams forwarded to the bots.
    pub down_forwarded_bytes: AtomicU64,
    pub up: AtomicU64,
    pub up_dropped: AtomicU64,
    pub down_forwarded: AtomicU64,
    pub down_dropped: AtomicU64,
    pub down_corrupted: AtomicU64,
    /// Every bot socket (source address and port) the proxy has heard from, in order of
    /// first datagram: what the server would see.
    pub bot_sockets: std::sync::Mutex<Vec<SocketAddr>>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub counts: Arc<ProxyCounts>,
    _thread: std::thread::JoinHandle<()>,
}

impl Proxy {
    /// Start on 127.0.0.1 (ephemeral port) in front of `server`; runs for `lifetime` at most.
    pub fn start(server: SocketAddr, imp: Impairment, lifetime: Duration) -> Proxy {
        let counts = Arc::new(ProxyCounts::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let c = counts.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
                tx.send(front.local_addr().expect("addr"))
                    .expect("send addr");
                let _ = tokio::time::timeout(lifetime, run(front, server, imp, c)).await;
            });
        });
        let addr = rx.recv().expect("proxy address");
        Proxy {
            addr,
            counts,
            _thread: thread,
        }
    }
}

async fn run(front: Arc<UdpSocket>, server: SocketAddr, imp: Impairment, counts: Arc<ProxyCounts>) {
    let upstreams: Arc<Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>> = Default::default();
    let mut sent_up: HashMap<SocketAddr, u64> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((n, bot)) = front.recv_from(&mut buf).await else {
            return;
        };
        let data = buf[..n].to_vec();
        counts.up_received.fetch_add(1, Ordering::Relaxed);
        counts
            .up_received_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        let up = {
            let mut map = upstreams.lock().await;
            match map.get(&bot) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
                    s.connect(server).await.expect("connect");
                    map.insert(bot, s.clone());
                    if let Ok(mut seen) = counts.bot_sockets.lock() {
                        seen.push(bot);
                    }
                    // Server to bot, with the per-bot drop rule.
                    let (s2, f2, c2) = (s.clone(), front.clone(), counts.clone());
                    tokio::spawn(async move {
                        let mut b = vec![0u8; 65536];
                        let mut nth = 0u64;
                        while let Ok(n) = s2.recv(&mut b).await {
                            nth += 1;
                            if imp.drop_every_down > 0 && nth % imp.drop_every_down == 0 {
                                c2.down_dropped.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            c2.down_forwarded.fetch_add(1, Ordering::Relaxed);
                            c2.down_forwarded_bytes
                                .fetch_add(n as u64, Ordering::Relaxed);
                            let mut d = b[..n].to_vec();
                            if imp.corrupt_every_down > 0 && nth % imp.corrupt_every_down == 0 {
                                if let Some(first) = d.first_mut() {
                                    *first ^= 0xFF;
                                }
                                c2.down_corrupted.fetch_add(1, Ordering::Relaxed);
                            }
                            let f3 = f2.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(imp.one_way_delay).await;
                                let _ = f3.send_to(&d, bot).await;
                            });
                        }
                    });
                    s
                }
            }
        };
        let nth = sent_up.entry(bot).or_default();
        *nth += 1;
        if imp.drop_every_up > 0 && *nth % imp.drop_every_up == 0 {
            counts.up_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        counts.up.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            tokio::time::sleep(imp.one_way_delay).await;
            let _ = up.send(&data).await;
        });
    }
}
