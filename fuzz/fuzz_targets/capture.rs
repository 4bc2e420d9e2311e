#![no_main]
//! The capture reader and every protocol's decode-only reader behind it (`tickswarm
//! inspect`): any bytes as a pcap or pcapng file, read in bounded memory, every flow tried
//! against every protocol and dialect. Seeds: each protocol's exchange as a pcapng file.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = tickswarm::capture::inspect(data);
});
