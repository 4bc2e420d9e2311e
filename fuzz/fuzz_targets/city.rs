#![no_main]
use tickswarm::games::city::codec::{decode_all, Dialect};
use tickswarm::protocol::ProtocolName;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tickswarm_fuzz::run(ProtocolName::City, data, |d| {
        let _ = decode_all(d, Dialect::Spec);
        let _ = decode_all(d, Dialect::Implementation);
    });
});
