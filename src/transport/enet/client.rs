//! [`EnetClient`]: one connection on its own host (one bot per socket).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::config::EnetConfig;
use super::host::EnetHost;
use super::types::{EnetError, EnetEvent, HostStats, PeerId, PeerState, PeerStats};
use crate::protocol::Transmit;

/// One ENet connection on its own host: the one-bot-per-socket case. The same contract as
/// [`EnetHost`], with the peer implied.
#[derive(Debug)]
pub struct EnetClient {
    host: EnetHost,
    peer: PeerId,
    server: SocketAddr,
}

impl EnetClient {
    /// Start connecting to `server` with `channels` channels and ENet's default settings.
    pub fn connect(now: Instant, server: SocketAddr, channels: usize) -> Result<Self, EnetError> {
        Self::connect_with(now, server, channels, 0, &EnetConfig::default())
    }

    /// [`connect`](Self::connect) with settings and the connect data. `config.peer_limit` is
    /// ignored (one peer).
    pub fn connect_with(
        now: Instant,
        server: SocketAddr,
        channels: usize,
        data: u32,
        config: &EnetConfig,
    ) -> Result<Self, EnetError> {
        let config = EnetConfig {
            peer_limit: 1,
            channel_limit: channels.max(1),
            ..config.clone()
        };
        let mut host = EnetHost::new(now, &config)?;
        let peer = host.connect(now, server, channels, data)?;
        Ok(Self { host, peer, server })
    }

    pub fn server(&self) -> SocketAddr {
        self.server
    }

    pub fn send(&mut self, channel: u8, reliable: bool, bytes: &[u8]) -> Result<(), EnetError> {
        self.host.send(self.peer, channel, reliable, bytes)
    }

    pub fn send_transmit(&mut self, t: &Transmit, buf: &[u8]) -> Result<(), EnetError> {
        self.host.send_transmit(self.peer, t, buf)
    }

    pub fn disconnect(&mut self, now: Instant, data: u32) {
        // The peer id is the host's own, so this cannot fail.
        let _ = self.host.disconnect(now, self.peer, data);
    }

    pub fn disconnect_now(&mut self, now: Instant, data: u32) {
        let _ = self.host.disconnect_now(now, self.peer, data);
    }

    /// A datagram from the socket. Datagrams from anyone but the server are dropped by ENet.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.host.handle_datagram(now, from, data);
    }

    pub fn service(&mut self, now: Instant) -> usize {
        self.host.service(now)
    }

    pub fn flush(&mut self, now: Instant) {
        self.host.flush(now);
    }

    pub fn poll_event(&mut self) -> Option<EnetEvent> {
        self.host.poll_event()
    }

    /// The next datagram for the server, copied into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        self.host.poll_transmit(buf)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.host.poll_timeout()
    }

    pub fn state(&self) -> PeerState {
        self.host
            .peer_state(self.peer)
            .unwrap_or(PeerState::Disconnected)
    }

    pub fn is_connected(&self) -> bool {
        self.state() == PeerState::Connected
    }

    pub fn stats(&self) -> PeerStats {
        self.host
            .peer_stats(self.peer)
            .expect("the client's own peer slot exists")
    }

    /// ENet's round-trip estimate, once measured.
    pub fn rtt(&self) -> Option<Duration> {
        self.stats().rtt
    }

    /// ENet's packet-loss estimate, 0.0..=1.0.
    pub fn packet_loss(&self) -> f64 {
        self.stats().packet_loss
    }

    pub fn host_stats(&self) -> HostStats {
        self.host.stats()
    }

    /// The host underneath, for what the client does not wrap.
    pub fn host_mut(&mut self) -> &mut EnetHost {
        &mut self.host
    }
}
