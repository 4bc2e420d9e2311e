#![no_main]
use tickswarm::games::cafe::codec::{decode, Dialect};
use tickswarm::protocol::ProtocolName;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tickswarm_fuzz::run(ProtocolName::Cafe, data, |d| {
        let _ = decode(d, Dialect::Spec);
        let _ = decode(d, Dialect::Implementation);
    });
});
