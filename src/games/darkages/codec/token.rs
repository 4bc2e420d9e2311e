//! The handoff token (§2.6's `handoff_token[32]`), minted by the zone a player leaves and
//! verified by the zone it enters. The spec leaves its contents to the implementation.
//!
//! Layout (32 bytes, little-endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | `entity_id u32`: the player keeps its id across zones |
//! | 4..8 | `to_zone u32`: only that zone accepts it |
//! | 8..16 | `expires_at_ms u64`: wall clock, ms since the UNIX epoch |
//! | 16..18 | `entry_z i16`: where along the border the player crosses (1/64 m) |
//! | 18 | `from_west u8`: 1 when it enters over the new zone's west border |
//! | 19 | `health u8` |
//! | 20..24 | `nonce u32` |
//! | 24..32 | `mac u64`: a keyed hash of bytes 0..24 |
//!
//! The MAC is a keyed 64-bit mix (SplitMix64 rounds over the secret and the first 24 bytes),
//! with the secret derived from the scenario's `handoff_secret` seed that every zone of a run
//! shares. It stops a forged or altered token from a confused client and makes verification
//! real work, as the game's auth service would; it is **not** cryptographic, and a real
//! deployment would use its own signed tokens. Expiry uses the wall clock because the zones
//! are separate servers with no shared monotonic clock.

use thiserror::Error;

/// Token bytes on the wire.
pub const TOKEN_LEN: usize = 32;

/// Why a zone refused a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TokenError {
    #[error("handoff token malformed or forged")]
    BadMac,
    #[error("handoff token for another zone")]
    WrongZone,
    #[error("handoff token expired")]
    Expired,
}

impl TokenError {
    /// The CONNECT_ACK message for this refusal; bots read `expired` at its start as an
    /// expired token.
    pub fn message(self) -> &'static str {
        match self {
            TokenError::BadMac => "bad handoff token",
            TokenError::WrongZone => "handoff token for another zone",
            TokenError::Expired => "expired handoff token",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TokenError::BadMac => "bad_mac",
            TokenError::WrongZone => "wrong_zone",
            TokenError::Expired => "expired",
        }
    }
}

/// What a token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoffToken {
    pub entity_id: u32,
    pub to_zone: u32,
    pub expires_at_ms: u64,
    pub entry_z: i16,
    pub from_west: bool,
    pub health: u8,
    pub nonce: u32,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The zones' shared secret from the scenario's seed.
pub fn secret_from_seed(seed: u64) -> u64 {
    mix(mix(seed ^ 0x6861_6E64_6F66_6621))
}

fn mac(secret: u64, body: &[u8; 24]) -> u64 {
    let mut h = mix(secret);
    for c in body.chunks_exact(8) {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = mix(h ^ w ^ secret.rotate_left(17));
    }
    mix(h ^ secret)
}

impl HandoffToken {
    /// The 32 bytes, signed with `secret`.
    pub fn seal(&self, secret: u64) -> [u8; TOKEN_LEN] {
        let mut body = [0u8; 24];
        body[0..4].copy_from_slice(&self.entity_id.to_le_bytes());
        body[4..8].copy_from_slice(&self.to_zone.to_le_bytes());
        body[8..16].copy_from_slice(&self.expires_at_ms.to_le_bytes());
        body[16..18].copy_from_slice(&self.entry_z.to_le_bytes());
        body[18] = u8::from(self.from_west);
        body[19] = self.health;
        body[20..24].copy_from_slice(&self.nonce.to_le_bytes());
        let mut out = [0u8; TOKEN_LEN];
        out[..24].copy_from_slice(&body);
        out[24..].copy_from_slice(&mac(secret, &body).to_le_bytes());
        out
    }

    /// Verify `bytes` for zone `zone` at wall-clock `now_ms`: MAC, then zone, then expiry.
    pub fn open(
        bytes: &[u8; TOKEN_LEN],
        secret: u64,
        zone: u32,
        now_ms: u64,
    ) -> Result<Self, TokenError> {
        let mut body = [0u8; 24];
        body.copy_from_slice(&bytes[..24]);
        let mut m = [0u8; 8];
        m.copy_from_slice(&bytes[24..]);
        if u64::from_le_bytes(m) != mac(secret, &body) {
            return Err(TokenError::BadMac);
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let mut e = [0u8; 8];
        e.copy_from_slice(&body[8..16]);
        let t = HandoffToken {
            entity_id: u32_at(0),
            to_zone: u32_at(4),
            expires_at_ms: u64::from_le_bytes(e),
            entry_z: i16::from_le_bytes([body[16], body[17]]),
            from_west: body[18] != 0,
            health: body[19],
            nonce: u32_at(20),
        };
        if t.to_zone != zone {
            return Err(TokenError::WrongZone);
        }
        if now_ms >= t.expires_at_ms {
            return Err(TokenError::Expired);
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_tokens_open_only_for_their_zone_until_they_expire() {
        let s = secret_from_seed(7);
        let t = HandoffToken {
            entity_id: 42,
            to_zone: 1,
            expires_at_ms: 10_000,
            entry_z: -64,
            from_west: true,
            health: 90,
            nonce: 3,
        };
        let b = t.seal(s);
        assert_eq!(HandoffToken::open(&b, s, 1, 9_999), Ok(t));
        assert_eq!(
            HandoffToken::open(&b, s, 1, 10_000),
            Err(TokenError::Expired)
        );
        assert_eq!(HandoffToken::open(&b, s, 0, 0), Err(TokenError::WrongZone));
        assert_eq!(
            HandoffToken::open(&b, secret_from_seed(8), 1, 0),
            Err(TokenError::BadMac)
        );
        let mut forged = b;
        forged[19] = 100;
        assert_eq!(
            HandoffToken::open(&forged, s, 1, 0),
            Err(TokenError::BadMac)
        );
    }
}
