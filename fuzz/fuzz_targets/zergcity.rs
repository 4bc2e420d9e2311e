#![no_main]
use tickswarm::games::zergcity::codec::{decode, Decompressor};
use tickswarm::protocol::ProtocolName;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tickswarm_fuzz::run(ProtocolName::ZergCity, data, |d| {
        // A small limit, so an LZ4 block claiming a huge size is refused before allocating.
        let mut dec = Decompressor::new(64 * 1024);
        let _ = decode(d, &mut dec);
        assert!(
            dec.capacity() <= 64 * 1024,
            "decompressor grew past its limit"
        );
    });
});
