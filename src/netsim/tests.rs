//! Each part of the link model against the figure it must produce, in simulated time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use crate::duration::Dur;

const MS: Duration = Duration::from_millis(1);

fn conditions(yaml: &str) -> Conditions {
    let n: NetworkConditions = serde_saphyr::from_str(yaml).expect("valid network section");
    n.validate().expect("valid values");
    n.both
}

/// `n` datagrams of `len` bytes, one every `gap`, through a link with `c`.
fn run(c: &Conditions, seed: u64, n: usize, gap: Duration, len: usize) -> (Link, Vec<Fate>) {
    let t0 = Instant::now();
    let mut link = Link::new(c, seed, t0);
    let fates = (0..n)
        .map(|i| link.submit(t0 + gap * i as u32, len))
        .collect();
    (link, fates)
}

#[test]
fn a_perfect_link_delivers_at_once() {
    let c = Conditions::default();
    assert!(c.is_perfect());
    let t0 = Instant::now();
    let mut link = Link::new(&c, 1, t0);
    assert_eq!(
        link.submit(t0, 100),
        Fate::Deliver {
            at: t0,
            copy_at: None
        }
    );
}

#[test]
fn latency_is_added_exactly() {
    let c = conditions("latency: 150ms");
    let t0 = Instant::now();
    let mut link = Link::new(&c, 1, t0);
    assert_eq!(
        link.submit(t0 + 5 * MS, 40),
        Fate::Deliver {
            at: t0 + 155 * MS,
            copy_at: None
        }
    );
}

#[test]
fn uniform_loss_matches_its_rate() {
    let c = conditions("loss: 5%");
    let (link, fates) = run(&c, 7, 100_000, MS, 50);
    let lost = fates
        .iter()
        .filter(|f| matches!(f, Fate::Dropped(_)))
        .count();
    assert_eq!(lost as u64, link.stats().lost_loss);
    // Binomial(100000, 0.05): sd 69; 5 sd either side.
    assert!((4_650..=5_350).contains(&lost), "{lost} lost");
}

#[test]
fn bursty_loss_has_its_rate_and_its_burst_length() {
    let c = conditions("loss: { rate: 2%, mean_burst: 5 }");
    let (_, fates) = run(&c, 11, 200_000, MS, 50);
    let lost: Vec<bool> = fates
        .iter()
        .map(|f| matches!(f, Fate::Dropped(_)))
        .collect();
    let n_lost = lost.iter().filter(|&&l| l).count() as f64;
    let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
    let rate = n_lost / lost.len() as f64;
    let mean_burst = n_lost / bursts;
    assert!((0.017..=0.023).contains(&rate), "rate {rate}");
    assert!((4.4..=5.6).contains(&mean_burst), "mean burst {mean_burst}");
    let uniform = LossModel::Bursty {
        rate: Share(0.02),
        mean_burst: 5.0,
    };
    assert!((uniform.mean_rate() - 0.02).abs() < 1e-12);
}

#[test]
fn jitter_never_reorders_and_stays_within_its_bounds() {
    let c = conditions("{ latency: 20ms, jitter: { uniform: 10ms } }");
    let t0 = Instant::now();
    let mut link = Link::new(&c, 3, t0);
    let mut last = t0;
    for i in 0..10_000u32 {
        let sent = t0 + MS * i;
        let Fate::Deliver { at, .. } = link.submit(sent, 60) else {
            panic!("no loss configured");
        };
        assert!(at >= last, "datagram {i} overtook the one before it");
        assert!(at >= sent + 20 * MS && at <= sent + 30 * MS, "datagram {i}");
        last = at;
    }
}

#[test]
fn percentile_jitter_follows_its_table() {
    let mut table = BTreeMap::new();
    table.insert("p50".to_string(), Dur(2 * MS));
    table.insert("p90".to_string(), Dur(10 * MS));
    let c = Conditions {
        jitter: Some(Jitter::Percentiles(table)),
        ..Conditions::default()
    };
    c.validate("").unwrap();
    // Datagrams far apart, so the order rule never lifts a delay.
    let t0 = Instant::now();
    let mut link = Link::new(&c, 5, t0);
    let mut delays: Vec<Duration> = (0..20_000u32)
        .map(|i| {
            let sent = t0 + Duration::from_secs(1) * i;
            match link.submit(sent, 60) {
                Fate::Deliver { at, .. } => at - sent,
                Fate::Dropped(r) => panic!("dropped: {r:?}"),
            }
        })
        .collect();
    delays.sort();
    let p50 = delays[10_000];
    let p90 = delays[18_000];
    assert!(
        p50 >= Duration::from_micros(1_850) && p50 <= Duration::from_micros(2_150),
        "p50 {p50:?}"
    );
    assert!(
        p90 >= Duration::from_micros(9_600) && p90 <= Duration::from_micros(10_000),
        "p90 {p90:?}"
    );
    assert!(*delays.last().unwrap() <= 10 * MS, "held at the last value");
}

#[test]
fn reorder_lets_later_datagrams_pass() {
    let c = conditions("{ latency: 5ms, reorder: 10%, reorder_delay: 20ms }");
    let (link, fates) = run(&c, 9, 10_000, MS, 60);
    let arrivals: Vec<Instant> = fates
        .iter()
        .map(|f| match f {
            Fate::Deliver { at, .. } => *at,
            Fate::Dropped(r) => panic!("dropped: {r:?}"),
        })
        .collect();
    let overtaken = arrivals.windows(2).filter(|w| w[1] < w[0]).count();
    let held = link.stats().reordered as usize;
    assert!((850..=1_150).contains(&held), "{held} held back");
    assert!(overtaken > 0 && overtaken <= held, "{overtaken} overtaken");
}

#[test]
fn duplicates_arrive_after_the_original() {
    let c = conditions("{ duplicate: 50%, duplicate_delay: 3ms }");
    let (link, fates) = run(&c, 13, 1_000, MS, 60);
    let copies = fates
        .iter()
        .filter_map(|f| match f {
            Fate::Deliver { at, copy_at } => copy_at.map(|c| c - *at),
            Fate::Dropped(_) => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(copies.len() as u64, link.stats().duplicated);
    assert!((400..=600).contains(&copies.len()), "{}", copies.len());
    assert!(copies.iter().all(|&d| d == 3 * MS));
}

#[test]
fn a_bandwidth_cap_delays_then_drops_at_the_queue() {
    // 80 kbit/s = 10,000 bytes/s: a 1,000-byte datagram takes 100 ms on the wire. A queue of
    // 3,000 bytes holds three datagrams not yet sent, the one on the wire included.
    let c = conditions("{ bandwidth_bps: 80000, queue_bytes: 3000 }");
    let t0 = Instant::now();
    let mut link = Link::new(&c, 1, t0);
    let fates: Vec<Fate> = (0..6).map(|_| link.submit(t0, 1_000)).collect();
    for (i, f) in fates.iter().take(3).enumerate() {
        assert_eq!(
            *f,
            Fate::Deliver {
                at: t0 + 100 * MS * (i as u32 + 1),
                copy_at: None
            },
            "datagram {i} waits for the ones before it"
        );
    }
    for f in &fates[3..] {
        assert_eq!(*f, Fate::Dropped(DropReason::Queue));
    }
    assert_eq!(link.stats().lost_queue, 3);
    // Once the queue has drained, datagrams go through again.
    assert_eq!(
        link.submit(t0 + Duration::from_secs(1), 1_000),
        Fate::Deliver {
            at: t0 + 1_100 * MS,
            copy_at: None
        }
    );
}

#[test]
fn outages_drop_everything_while_down() {
    let c = conditions("outage: { every: 10s, down_for: 2s }");
    let (link, fates) = run(&c, 1, 30_000, MS, 60);
    // Down during [10 s, 12 s) and [20 s, 22 s): 4,000 datagrams of 30,000.
    let lost = fates
        .iter()
        .filter(|f| matches!(f, Fate::Dropped(DropReason::Outage)))
        .count();
    assert_eq!(lost, 4_000);
    assert_eq!(link.stats().lost_outage, 4_000);
    assert!(matches!(fates[9_999], Fate::Deliver { .. }));
    assert!(matches!(fates[10_000], Fate::Dropped(DropReason::Outage)));
    assert!(matches!(fates[12_000], Fate::Deliver { .. }));
}

#[test]
fn the_same_seed_replays_the_same_fates() {
    let c = conditions(
        "{ latency: 30ms, jitter: { normal: 5ms }, loss: 3%, duplicate: 1%, reorder: 1% }",
    );
    let t0 = Instant::now();
    let fates = |seed: u64| {
        let mut link = Link::new(&c, seed, t0);
        (0..5_000u32)
            .map(|i| link.submit(t0 + MS * i, 80))
            .collect::<Vec<_>>()
    };
    assert!(fates(42) == fates(42), "same seed, same fates");
    assert!(fates(42) != fates(43), "another seed, other fates");
}

#[test]
fn directions_take_their_overrides() {
    let n: NetworkConditions =
        serde_saphyr::from_str("{ latency: 40ms, loss: 1%, down: { loss: 5% } }").unwrap();
    let (up, down) = n.directions();
    assert_eq!(up.latency, Some(Dur(40 * MS)));
    assert_eq!(down.latency, Some(Dur(40 * MS)));
    assert_eq!(up.loss, Some(LossModel::Uniform(Share(0.01))));
    assert_eq!(down.loss, Some(LossModel::Uniform(Share(0.05))));
}

#[test]
fn bad_values_name_their_key() {
    let bad = |yaml: &str| {
        let n: NetworkConditions = serde_saphyr::from_str(yaml).unwrap();
        n.validate().unwrap_err().to_string()
    };
    assert_eq!(
        bad("outage: { every: 1s, down_for: 2s }"),
        "network.outage: down_for must be shorter than every, and every above 0"
    );
    assert_eq!(
        bad("down: { loss: { rate: 2%, mean_burst: 0.5 } }"),
        "network.down.loss.mean_burst: must be at least 1 (datagrams)"
    );
    assert_eq!(
        bad("queue_bytes: 1000"),
        "network.queue_bytes: needs bandwidth_bps (a queue in front of a cap)"
    );
    assert!(serde_saphyr::from_str::<NetworkConditions>("loss: 150%").is_err());
    assert!(serde_saphyr::from_str::<NetworkConditions>("latncy: 5ms").is_err());
}

/// Delays of `n` datagrams sent 1 s apart (so the order rule never lifts one), sorted.
fn jitter_delays(c: &Conditions, seed: u64, n: u32) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut link = Link::new(c, seed, t0);
    let mut d: Vec<Duration> = (0..n)
        .map(|i| {
            let sent = t0 + Duration::from_secs(1) * i;
            match link.submit(sent, 60) {
                Fate::Deliver { at, .. } => at - sent,
                Fate::Dropped(r) => panic!("dropped: {r:?}"),
            }
        })
        .collect();
    d.sort();
    d
}

#[test]
fn latency_median_is_fixed_plus_the_jitter_median() {
    // Uniform 0..20 ms: median 10 ms, p90 18 ms, on top of 40 ms.
    let d = jitter_delays(
        &conditions("{ latency: 40ms, jitter: { uniform: 20ms } }"),
        21,
        20_000,
    );
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    assert!((ms(d[10_000]) - 50.0).abs() <= 1.0, "p50 {:?}", d[10_000]);
    assert!((ms(d[18_000]) - 58.0).abs() <= 1.0, "p90 {:?}", d[18_000]);
    assert!(d[0] >= 40 * MS && d[19_999] <= 60 * MS);
    // A table: the median is its p50.
    let d = jitter_delays(
        &conditions(
            "{ latency: 40ms, jitter: { percentiles: { p50: 5ms, p90: 20ms, p99: 60ms } } }",
        ),
        22,
        20_000,
    );
    assert!((ms(d[10_000]) - 45.0).abs() <= 1.0, "p50 {:?}", d[10_000]);
    assert!((ms(d[19_800]) - 100.0).abs() <= 2.0, "p99 {:?}", d[19_800]);
}

#[test]
fn normal_jitter_has_its_spread() {
    // Normal(0, 10 ms) cut at 0: half the datagrams get no jitter, the others a half-normal
    // draw whose mean is σ·√(2/π) = 7.98 ms.
    let d = jitter_delays(
        &conditions("{ latency: 40ms, jitter: { normal: 10ms } }"),
        23,
        40_000,
    );
    let zero = d.iter().filter(|&&x| x == 40 * MS).count() as f64 / d.len() as f64;
    assert!((zero - 0.5).abs() <= 0.01, "{zero} without jitter");
    let pos: Vec<f64> = d
        .iter()
        .filter(|&&x| x > 40 * MS)
        .map(|x| (*x - 40 * MS).as_secs_f64() * 1e3)
        .collect();
    let mean = pos.iter().sum::<f64>() / pos.len() as f64;
    let expect = 10.0 * (2.0 / std::f64::consts::PI).sqrt();
    assert!(
        (mean / expect - 1.0).abs() <= 0.02,
        "mean jitter {mean} ms, expected {expect}"
    );
}

#[test]
fn the_reordered_are_exactly_the_held_back_that_a_later_one_passes() {
    // Held back 20 ms, one datagram every 1 ms, no jitter: datagram i arrives after a later
    // one exactly when it was held and one of the next 19 was not.
    let c = conditions("{ latency: 5ms, reorder: 10%, reorder_delay: 20ms }");
    let (link, fates) = run(&c, 29, 10_000, MS, 60);
    let t0_at = |i: usize| match fates[i] {
        Fate::Deliver { at, .. } => at,
        Fate::Dropped(r) => panic!("dropped: {r:?}"),
    };
    let sent0 = (0..fates.len())
        .map(|i| t0_at(i) - MS * i as u32)
        .min()
        .expect("datagrams");
    let held: Vec<bool> = (0..fates.len())
        .map(|i| t0_at(i) - MS * i as u32 > sent0)
        .collect();
    assert_eq!(
        held.iter().filter(|&&h| h).count() as u64,
        link.stats().reordered,
        "the link counts each one it held"
    );
    let late: Vec<usize> = (0..fates.len())
        .filter(|&i| (i + 1..fates.len()).any(|j| t0_at(j) < t0_at(i)))
        .collect();
    let expected: Vec<usize> = (0..fates.len())
        .filter(|&i| held[i] && (i + 1..(i + 20).min(fates.len())).any(|j| !held[j]))
        .collect();
    assert_eq!(late, expected);
}

#[test]
fn a_bandwidth_cap_is_held_under_overload() {
    // 1 Mbit/s, offered 2 Mbit/s (500-byte datagrams every 2 ms) for 10 s: what is delivered
    // leaves at the cap (within 5 %), the rest is dropped at the queue.
    let c = conditions("{ bandwidth_bps: 1000000, queue_bytes: 20000 }");
    let (link, fates) = run(&c, 1, 5_000, 2 * MS, 500);
    let at: Vec<Instant> = fates
        .iter()
        .filter_map(|f| match f {
            Fate::Deliver { at, .. } => Some(*at),
            Fate::Dropped(_) => None,
        })
        .collect();
    let span = (at[at.len() - 1] - at[0]).as_secs_f64();
    let bps = (at.len() - 1) as f64 * 500.0 * 8.0 / span;
    assert!((bps / 1e6 - 1.0).abs() <= 0.05, "{bps} bit/s");
    assert!(link.stats().lost_queue > 2_000, "{:?}", link.stats());
}

/// The conditions are described as summary.json keeps them: the keys set (in the order of
/// their names), each as written; no conditions at all are the real link.
#[test]
fn conditions_are_described_as_written() {
    let n: NetworkConditions = serde_saphyr::from_str(
        "latency: 75ms\njitter: { normal: 8ms }\ndown:\n  loss: { rate: 3%, mean_burst: 4 }\n",
    )
    .expect("valid network section");
    let written = serde_json::to_value(&n).unwrap();
    assert_eq!(n.to_string(), describe_written(Some(&written)));
    assert_eq!(
        n.to_string(),
        "down: {loss: {mean_burst: 4.0, rate: 3%}}, jitter: {normal: 8ms}, latency: 75ms"
    );
    assert_eq!(NetworkConditions::default().to_string(), REAL_LINK);
    assert_eq!(describe_written(None), REAL_LINK);
}
