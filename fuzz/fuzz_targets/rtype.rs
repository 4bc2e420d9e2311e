#![no_main]
use tickswarm::games::rtype::codec::{decode, FloatOrder};
use tickswarm::protocol::ProtocolName;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tickswarm_fuzz::run(ProtocolName::Rtype, data, |d| {
        let _ = decode(d, FloatOrder::Big);
        let _ = decode(d, FloatOrder::Little);
    });
});
