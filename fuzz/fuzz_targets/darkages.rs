#![no_main]
use tickswarm::games::darkages::codec::decode;
use tickswarm::protocol::ProtocolName;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tickswarm_fuzz::run(ProtocolName::DarkAges, data, |d| {
        let _ = decode(d);
    });
});
