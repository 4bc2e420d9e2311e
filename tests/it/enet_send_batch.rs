//! ENet bots' datagrams leave batched: every host's datagrams of one worker wake-up go to the
//! kernel in one `io_uring_enter` (`TICKSWARM_IO=plain`: one `send()` each, as before).
//!
//! What must hold on both paths, whatever the machine's load: the server receives every
//! message the bots sent (nothing lost or reordered into a gap by batching; on loopback only
//! a receive buffer the kernel found full can lose one, and the kernel counts those), and
//! `generator.send_io` counts every datagram handed to a system call exactly once: the
//! datagrams on the wire plus those the kernel refused. Batched, fewer calls than datagrams.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tickswarm::engine::spawn_reference_server;
use tickswarm::games::city::CityOptions;
use tickswarm::scenario::{ProtocolSection, ServerSection};

use crate::common::kernel::UdpDrops;
use crate::common::scenario::Scenario;
use crate::common::summary::{finish, run_command};

/// ENet packs what one flush queued for a peer into one datagram: a datagram the kernel
/// dropped can carry a few of a bot's messages.
const ENET_MESSAGES_PER_DATAGRAM: u64 = 4;
const BOTS: u64 = 40;

/// One run of `BOTS` City bots over ENet, 10 per host socket, on one worker, against a
/// City reference server in this process; `io` is `TICKSWARM_IO`. The summary, and the
/// messages the server received.
fn swarm(io: &str) -> (Value, u64, u64) {
    let section = ProtocolSection::of(&tickswarm::games::city::City, CityOptions::default());
    let server = ServerSection::default();
    let bind: SocketAddr = (Ipv4Addr::LOCALHOST, 0).into();
    let handle = spawn_reference_server(bind, &section, &server).expect("city server");
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("city.yaml");
    Scenario::file("city.yaml")
        .set("population.stages.0.ramp_to", BOTS)
        .set("population.stages.0.over", "500ms")
        .set("population.stages.1.hold", "2s")
        .set("duration", "3s")
        .set("engine.bots_per_socket", 10)
        .add("engine.workers", 1)
        .write(&file);
    let out = tmp.path().join("out");
    let drops = UdpDrops::now();
    let o = run_command(&file, &["--target", &handle.addr.to_string()], &out)
        .env("TICKSWARM_IO", io)
        .output()
        .expect("run");
    let s = finish(&o, &out, &[0, 1]);
    // The server reports its counters every 100 ms; the run has ended its sessions.
    std::thread::sleep(Duration::from_millis(400));
    let received = handle.stats().datagrams_in;
    let dropped = drops.since();
    drop(handle);
    (s, received, dropped)
}

/// Every message the bots sent reached the server; `send_io` holds every datagram once.
fn assert_delivered_and_counted(s: &Value, received: u64, dropped: u64, io: &str) {
    assert_eq!(s["bots"]["connected"], BOTS, "{io}: {}", s["errors"]);
    let sent = s["bandwidth"]["up_packets"].as_u64().expect("up_packets");
    // About 2 s of 60 Hz input per bot on a quiet machine; a loaded one connects them late
    // (1,871 seen at load 10): enough to count either way.
    assert!(sent > BOTS * 20, "{io}: {sent} messages sent");
    assert!(received <= sent, "{io}: server got {received} of {sent}");
    assert!(
        sent - received <= dropped * ENET_MESSAGES_PER_DATAGRAM,
        "{io}: the server got {received} of the {sent} messages sent; the kernel dropped {dropped} datagrams"
    );
    let g = &s["generator"];
    eprintln!(
        "{io}: {sent} messages sent, {received} received, {dropped} kernel drops; send_io {}",
        g["send_io"]
    );
    let refused: u64 = g["send_errors"]
        .as_object()
        .expect("send_errors")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    let wire = s["bandwidth"]["wire_up_packets"].as_u64().expect("wire up");
    let io_counts = &g["send_io"];
    assert_eq!(
        io_counts["datagrams"].as_u64(),
        Some(wire + refused),
        "{io}: {io_counts}, {wire} on the wire, {refused} refused"
    );
}

#[test]
fn enet_bots_deliver_everything_on_both_send_paths_and_batch_their_system_calls() {
    let (plain, received, dropped) = swarm("plain");
    assert_delivered_and_counted(&plain, received, dropped, "plain");
    let io = &plain["generator"]["send_io"];
    assert_eq!(io["path"], "send", "{io}");
    assert_eq!(io["workers_plain"], 1, "{io}");
    assert_eq!(
        io["syscalls"], io["datagrams"],
        "one send() per datagram: {io}"
    );
    assert_eq!(io["batch_max"], 1, "{io}");

    let (auto, received, dropped) = swarm("auto");
    assert_delivered_and_counted(&auto, received, dropped, "auto");
    let io = &auto["generator"]["send_io"];
    let (calls, datagrams) = (
        io["syscalls"].as_u64().expect("syscalls"),
        io["datagrams"].as_u64().expect("datagrams"),
    );
    if io["path"] == "send" {
        // This machine refuses io_uring (a seccomp profile, an old kernel): the fallback.
        assert_eq!(calls, datagrams, "{io}");
        return;
    }
    assert_eq!(io["path"], "io_uring", "{io}");
    assert_eq!(io["workers_uring"], 1, "{io}");
    // 4 hosts of 10 bots at 60 Hz: whatever the timing, the ENet handshakes of a host's bots,
    // opened in one wake-up, leave together, and so do the ENet datagrams of bots due at one
    // timer step.
    assert!(calls < datagrams, "{io}");
    assert!(io["batch_max"].as_u64().expect("batch_max") >= 2, "{io}");
}
