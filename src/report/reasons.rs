//! Why a run failed, in sentences a person reads first: the top of report.html and the end of
//! the console output.
//!
//! A failed gate is read in CI by someone who did not write the scenario. A red ✗ in a table
//! says which threshold; it does not say "the server never answered" or "wrong dialect",
//! which is what they need to act. Each reason here is one sentence: what failed, observed
//! against the limit, and the likely cause where the summary shows one. Causes come first,
//! since one cause (a dead server) fails several thresholds at once.

use super::build::describe_outcome;
use super::format::{fmt_counts, fmt_pct};
use super::summary::Summary;

/// The verdict's reasons, causes first, then one sentence per failed threshold. Empty for a
/// passing run.
pub fn verdict_reasons(s: &Summary) -> Vec<String> {
    if s.verdict == "pass" {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(a) = &s.aborted {
        out.push(format!(
            "The run stopped itself (abort_on_fail): {}.",
            a.describe()
        ));
    }
    let other_dialect = other_dialect(s);
    if let (true, Some((other, n))) = (
        s.bots.planned > 0 && s.bots.connected == 0 && !s.interrupted,
        other_dialect,
    ) {
        out.push(format!(
            "The server answered in another dialect: none of the {} bots completed the \
             handshake with {}, and {n} datagrams it sent fit the `{other}` dialect, not `{}`. \
             Set `dialect: {other}` in the scenario's protocol section.",
            s.bots.planned, s.target, s.dialect
        ));
    } else if s.bots.planned > 0 && s.bots.connected == 0 && !s.interrupted {
        let seen = if !s.errors.connect.is_empty() {
            format!("handshake failures: {}", fmt_counts(&s.errors.connect))
        } else if !s.generator.send_errors.is_empty() {
            // An ICMP port unreachable reads as connection_refused: nothing listens there.
            format!(
                "no reply; socket errors: {}",
                fmt_counts(&s.generator.send_errors)
            )
        } else {
            "nothing came back".to_string()
        };
        out.push(format!(
            "The server never answered: none of the {} bots completed the handshake with {} \
             ({seen}). Check the target's address and port, and that the server is up.",
            s.bots.planned, s.target
        ));
    }
    if let Some(why) = some_never_answered(s) {
        out.push(why);
    }
    if let Some(why) = missing_sources(s) {
        out.push(why);
    }
    if let (Some((other, n)), true) = (other_dialect, s.bots.connected > 0) {
        out.push(format!(
            "Wrong dialect: {n} datagrams from the server fit the `{other}` dialect, not \
             `{}`. Set `dialect: {other}` in the scenario's protocol section.",
            s.dialect
        ));
    }
    if s.generator.saturated {
        out.push(format!(
            "The load generator was saturated ({} of its input slots skipped): the figures \
             measure this machine as much as the server. Run fewer bots per machine, or shard.",
            s.generator
                .skipped_share
                .map_or_else(|| "none".to_string(), fmt_pct)
        ));
    }
    for t in s.thresholds.iter().filter(|t| !t.ok) {
        let outcome = describe_outcome(t);
        out.push(match &t.unmeasurable {
            Some(_) => format!("`{}` failed: {outcome}.", t.condition),
            None if t.observed.is_none() => format!(
                "`{}` failed: nothing was measured (no data), and a gate never passes on no \
                 data.",
                t.condition
            ),
            None => format!("`{}` failed: {outcome}.", t.condition),
        });
    }
    if s.interrupted {
        out.push("The run was interrupted: its figures cover only the part that ran.".into());
    }
    out
}

/// Datagrams from the server that fit another dialect of the protocol than the run's, and
/// how many: the server did answer, in words the bots were not told to expect (so a run
/// with no bot in is not an unreachable target).
pub fn other_dialect(s: &Summary) -> Option<(&str, u64)> {
    s.protocol_metrics.iter().find_map(|(key, value)| {
        let other = key.strip_prefix("dialect_hint.")?;
        let n = value.as_u64().filter(|&n| n > 0)?;
        (other != s.dialect).then_some((other, n))
    })
}

/// Some bots played and others never completed the handshake: say how many and why. A
/// handshake nobody answered (`unanswered`) while others were answered is what a server that
/// refuses without a word past a per-address or per-subnet cap looks like.
fn some_never_answered(s: &Summary) -> Option<String> {
    if s.bots.connected == 0 || s.errors.connect.is_empty() {
        return None;
    }
    let n: u64 = s.errors.connect.values().sum();
    let cause = if s.errors.connect.contains_key("unanswered") {
        " The server answered some bots and never the others: it may cap connections per \
         address or per subnet and refuse without a word past the cap. Spread the bots over \
         more addresses and subnets (engine.source_addresses)."
    } else {
        ""
    };
    Some(format!(
        "{n} bots never completed the handshake while {} did ({}).{cause}",
        s.bots.connected,
        fmt_counts(&s.errors.connect)
    ))
}

/// Bots whose source address (`engine.source_addresses`) is on no interface of the load
/// machine: which addresses, and how to add them.
fn missing_sources(s: &Summary) -> Option<String> {
    let n = *s.errors.connect.get("socket.address_not_available")?;
    let rows = s.source_addresses.as_ref()?;
    let none: Vec<&str> = rows
        .rows
        .iter()
        .filter(|r| r.planned > 0 && r.connected == 0)
        .map(|r| r.source.as_str())
        .collect();
    let shown = match none.as_slice() {
        [] => String::new(),
        [a, b, c, _, ..] => format!(" (among them {a}, {b}, {c} and {} more)", none.len() - 3),
        few => format!(" ({})", few.join(", ")),
    };
    Some(format!(
        "{n} bots could not bind their source address{shown}: it is not on any interface of \
         this machine. Add it (`ip addr add ADDRESS/32 dev IFACE`, `ip -6 addr add \
         ADDRESS/128 dev IFACE`) or change engine.source_addresses."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::summary::{BotCounts, ThresholdResult};

    fn failed(condition: &str, metric: &str, observed: Option<f64>) -> ThresholdResult {
        ThresholdResult {
            metric: metric.into(),
            condition: condition.into(),
            observed,
            ok: false,
            default: false,
            unmeasurable: None,
            skipped: false,
        }
    }

    #[test]
    fn a_dead_server_is_named_before_the_thresholds_it_failed() {
        let mut s = Summary {
            verdict: "fail".into(),
            target: "127.0.0.1:9".into(),
            bots: BotCounts {
                planned: 20,
                ..BotCounts::default()
            },
            ..Summary::default()
        };
        s.thresholds = vec![failed(
            "snapshots_applied > 0",
            "snapshots_applied",
            Some(0.0),
        )];
        let r = verdict_reasons(&s);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(
            r[0].starts_with("The server never answered: none of the 20 bots completed the handshake with 127.0.0.1:9 (nothing came back)"),
            "{}",
            r[0]
        );
        assert_eq!(r[1], "`snapshots_applied > 0` failed: observed 0.");
    }

    /// Against a server of the other dialect no bot may get in at all (R-Type's real
    /// server answers nothing the spec bot can read): the banner says the server did answer,
    /// in which dialect, instead of "nothing came back".
    #[test]
    fn no_bot_in_but_bytes_of_another_dialect_name_the_dialect_not_a_dead_server() {
        let mut s = Summary {
            verdict: "fail".into(),
            dialect: "spec".into(),
            target: "127.0.0.1:8081".into(),
            bots: BotCounts {
                planned: 20,
                ..BotCounts::default()
            },
            ..Summary::default()
        };
        s.protocol_metrics
            .insert("dialect_hint.implementation".into(), 108.into());
        let r = verdict_reasons(&s);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            r[0],
            "The server answered in another dialect: none of the 20 bots completed the \
             handshake with 127.0.0.1:8081, and 108 datagrams it sent fit the `implementation` \
             dialect, not `spec`. Set `dialect: implementation` in the scenario's protocol \
             section."
        );
    }

    #[test]
    fn a_wrong_dialect_says_which_one_to_set() {
        let mut s = Summary {
            verdict: "fail".into(),
            dialect: "spec".into(),
            bots: BotCounts {
                planned: 2,
                connected: 2,
                ..BotCounts::default()
            },
            ..Summary::default()
        };
        s.protocol_metrics
            .insert("dialect_hint.implementation".into(), 120.into());
        s.thresholds = vec![failed(
            "downstream_loss < 1%",
            "loss.downstream.rate",
            Some(0.969),
        )];
        let r = verdict_reasons(&s);
        assert!(
            r[0].contains("fit the `implementation` dialect, not `spec`"),
            "{r:?}"
        );
        assert!(r[0].contains("Set `dialect: implementation`"), "{r:?}");
        assert_eq!(r[1], "`downstream_loss < 1%` failed: observed 96.9%.");
    }

    #[test]
    fn bots_some_server_never_answered_while_others_played_are_named_with_the_likely_cap() {
        let mut s = Summary {
            verdict: "fail".into(),
            bots: BotCounts {
                planned: 25,
                connected: 20,
                ..BotCounts::default()
            },
            ..Summary::default()
        };
        s.errors.connect.insert("unanswered".into(), 5);
        let r = verdict_reasons(&s);
        assert!(
            r[0].starts_with(
                "5 bots never completed the handshake while 20 did (unanswered: 5). The server \
                 answered some bots and never the others"
            ),
            "{r:?}"
        );
        assert!(r[0].contains("engine.source_addresses"), "{r:?}");
        s.errors.connect.clear();
        s.errors.connect.insert("refused".into(), 5);
        let r = verdict_reasons(&s);
        assert_eq!(
            r[0],
            "5 bots never completed the handshake while 20 did (refused: 5)."
        );
    }

    #[test]
    fn a_passing_run_has_no_reasons() {
        let s = Summary {
            verdict: "pass".into(),
            ..Summary::default()
        };
        assert!(verdict_reasons(&s).is_empty());
    }
}
