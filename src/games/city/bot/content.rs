//! The content transfer: the manifest, the ContentRequest for what the bot lacks, chunks
//! checked against size and FNV-1a checksum as they stream, ContentComplete.

use super::*;

/// One asset of the manifest, as the bot tracks it.
#[derive(Debug, Clone)]
pub struct AssetState {
    pub resource_id: u64,
    pub size: u64,
    pub checksum: u64,
    pub cached: bool,
    /// Bytes received so far and their running checksum.
    pub received: u64,
    pub(super) hash: Fnv64,
    pub(super) next_chunk: u32,
    pub(super) total_chunks: Option<u32>,
    pub outcome: AssetOutcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetOutcome {
    /// Already cached, not requested.
    Cached,
    /// Requested, chunks pending.
    Pending,
    /// All chunks arrived; size and checksum match the manifest.
    Verified,
    /// Size or checksum mismatch, or chunks out of order.
    Failed,
}

/// Content-transfer progress, for tests and reports.
#[derive(Debug, Clone, Default)]
pub struct ContentProgress {
    pub assets: usize,
    pub cached: usize,
    pub requested: usize,
    pub verified: usize,
    pub failed: usize,
    pub bytes: u64,
    pub complete: bool,
}

impl CityBot {
    pub(super) fn on_manifest(&mut self, assets: &[AssetEntry<'_>], rec: &mut Recorder) {
        if self.stage != Stage::Content || self.manifest_seen {
            rec.event("unexpected_manifest");
            return;
        }
        self.manifest_seen = true;
        let share = self.opts.cached_content_share.clamp(0.0, 1.0);
        for a in assets {
            // Cached or not: a per-bot, per-asset coin from the bot's seed, so the share holds
            // over the swarm and a rerun caches the same assets.
            let coin = splitmix(self.params.seed ^ a.resource_id.rotate_left(17));
            let cached = (coin >> 11) as f64 / (1u64 << 53) as f64 <= share && share > 0.0;
            self.assets.push(AssetState {
                resource_id: a.resource_id,
                size: a.size,
                checksum: a.checksum,
                cached,
                received: 0,
                hash: Fnv64::new(),
                next_chunk: 0,
                total_chunks: None,
                outcome: if cached {
                    AssetOutcome::Cached
                } else {
                    AssetOutcome::Pending
                },
            });
            if !cached {
                self.request_ids.push(a.resource_id);
            }
        }
        rec.events
            .add("content_assets_requested", self.request_ids.len() as u64);
        if self.request_ids.is_empty() {
            // Nothing missing: an empty request still tells the server to go on.
            self.out.push_back(Out::ContentRequest { from: 0, to: 0 });
        }
        let n = self.request_ids.len();
        for from in (0..n).step_by(REQUEST_IDS_PER_MESSAGE) {
            let to = (from + REQUEST_IDS_PER_MESSAGE).min(n);
            self.out.push_back(Out::ContentRequest { from, to });
        }
    }

    pub(super) fn on_chunk(
        &mut self,
        id: u64,
        index: u32,
        total: u32,
        data: &[u8],
        rec: &mut Recorder,
    ) {
        let Some(a) = self.assets.iter_mut().find(|a| a.resource_id == id) else {
            rec.event("chunk_unknown_asset");
            return;
        };
        if a.outcome != AssetOutcome::Pending {
            rec.event("chunk_unrequested");
            return;
        }
        self.content_bytes += data.len() as u64;
        rec.events.add("content_bytes", data.len() as u64);
        let total_known = *a.total_chunks.get_or_insert(total);
        if index != a.next_chunk || total != total_known {
            // The reliable channel is ordered: a gap or a changed total is the server's fault.
            a.outcome = AssetOutcome::Failed;
            rec.event("content_chunk_out_of_order");
            return;
        }
        a.hash.update(data);
        a.received += data.len() as u64;
        a.next_chunk += 1;
        if a.next_chunk == total {
            if a.received == a.size && a.hash.finish() == a.checksum {
                a.outcome = AssetOutcome::Verified;
                rec.event("content_assets_verified");
            } else {
                a.outcome = AssetOutcome::Failed;
                rec.event("content_checksum_mismatch");
            }
        }
    }

    pub(super) fn on_content_complete(&mut self, now: Instant, rec: &mut Recorder) {
        if self.stage != Stage::Content || !self.manifest_seen {
            rec.event("unexpected_content_complete");
            return;
        }
        self.content_complete = true;
        let incomplete = self
            .assets
            .iter()
            .filter(|a| a.outcome == AssetOutcome::Pending)
            .count();
        if incomplete > 0 {
            rec.events.add("content_incomplete", incomplete as u64);
        }
        if let Some(h) = self.hello_at {
            rec.record_extra(
                "content_time_us",
                now.saturating_duration_since(h).as_micros() as u64,
            );
        }
        self.stage = Stage::AwaitWorld;
    }
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash of `x`.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
