//! Ping/Pong: round trips, and the bot's estimate of the server's tick from them.

use super::*;

impl ZergCityBot {
    pub(super) fn on_pong(&mut self, now: Instant, ts: u64, server_tick: u64, rec: &mut Recorder) {
        let Some(k) = self
            .pings
            .iter()
            .position(|p| p.is_some_and(|(t, _)| t == ts))
        else {
            rec.event("pong_unmatched");
            return;
        };
        let Some((_, sent)) = self.pings[k].take() else {
            return;
        };
        let rtt = now.saturating_duration_since(sent);
        if rtt > self.me.params.server_silence_timeout {
            rec.event("pong_late");
            return;
        }
        rec.record_rtt(rtt.as_micros() as u64);
        // The server's tick now: its tick when it answered, plus half the round trip.
        let rate = f64::from(self.tick_rate);
        let server_now = server_tick as f64 + rtt.as_secs_f64() / 2.0 * rate;
        if let Some(local) = self.estimated_tick(now) {
            let offset_us = ((local - server_now).abs() / rate * 1e6) as u64;
            rec.record_extra("clock_offset_us", offset_us.max(1));
        }
        self.clock = Some((server_now, now));
    }

    pub(super) fn estimated_tick(&self, now: Instant) -> Option<f64> {
        let (t, at) = self.clock?;
        Some(t + now.saturating_duration_since(at).as_secs_f64() * f64::from(self.tick_rate))
    }

    pub(super) fn send_ping(&mut self, now: Instant, rec: &mut Recorder) {
        let ts = self.micros_now(now);
        let k = match self.pings.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                // Every slot in flight: the oldest is taken as lost.
                rec.event("ping_lost");
                let (k, _) = self
                    .pings
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, p)| p.map(|(_, s)| s))
                    .unwrap_or((0, &None));
                k
            }
        };
        self.pings[k] = Some((ts, now));
        self.out.push_back(Out::Ping(ts));
    }
}
