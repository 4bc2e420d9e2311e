//! The City bot's random numbers (its input pattern's turns, its first chat's offset): an
//! 8-byte SplitMix64 instead of a 320-byte ChaCha8 generator, at 10,000 bots 3 MB less.
//!
//! A bot draws a few numbers a second for its pattern, nothing that needs a cryptographic or
//! long-period generator; SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
//! number generators", 2014; the seeding generator of the xoshiro family) passes BigCrush,
//! and consecutive seeds (bot `i`'s seed and bot `i + 1`'s) give unrelated sequences, which
//! is what it was designed for. The same seed gives the same sequence on every platform and
//! in every version: `rand_xoshiro` fixes the algorithm, not a library's choice of the day
//! (`rand`'s `SmallRng` may change between its versions).

/// SplitMix64 (see the module docs).
pub(super) type BotRng = rand_xoshiro::SplitMix64;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};

    /// The reference sequence of SplitMix64 seeded with 1234567 (the values published with
    /// the algorithm's C reference implementation, splitmix64.c).
    #[test]
    fn is_splitmix64() {
        let mut r = BotRng::seed_from_u64(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn is_eight_bytes() {
        assert_eq!(std::mem::size_of::<BotRng>(), 8);
    }
}
