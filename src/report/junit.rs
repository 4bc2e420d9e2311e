//! JUnit XML: one test case per threshold, so CI systems show the gate in their test tab.
//!
//! Scenario names, conditions and metric paths are user input, so every value goes through
//! [`xml_escape`], which also drops what XML 1.0 cannot carry at all: a CI parser rejects the
//! whole file over one control character.

use std::fmt::Write as _;

use super::build::describe_outcome;
use super::summary::Summary;

/// `write!` into a `String`, which cannot fail.
macro_rules! w {
    ($dst:expr, $($arg:tt)*) => {{
        let _ = write!($dst, $($arg)*);
    }};
}

pub fn render(s: &Summary) -> String {
    let failures = s.thresholds.iter().filter(|t| !t.ok).count();
    let skipped = s.thresholds.iter().filter(|t| t.skipped).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w!(
        x,
        "<testsuites name=\"tickswarm\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">\n",
        s.thresholds.len(),
        failures,
        skipped,
        s.duration_s
    );
    w!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\" timestamp=\"{}\">\n",
        xml_escape(&s.scenario),
        s.thresholds.len(),
        failures,
        skipped,
        s.duration_s,
        xml_escape(&s.started_at)
    );
    // Per group (`groups:`): its figures as the suite's properties (its thresholds are test
    // cases like any other).
    let props = super::groups::figures(s);
    if !props.is_empty() {
        x.push_str("    <properties>\n");
        for (name, value) in props {
            w!(
                x,
                "      <property name=\"{}\" value=\"{}\"/>\n",
                xml_escape(&name),
                xml_escape(&value)
            );
        }
        x.push_str("    </properties>\n");
    }
    for t in &s.thresholds {
        w!(
            x,
            "    <testcase classname=\"tickswarm.{}\" name=\"{}\">\n",
            xml_escape(&s.protocol),
            xml_escape(&t.condition)
        );
        if t.skipped {
            w!(
                x,
                "      <skipped message=\"{} ({})\"/>\n",
                xml_escape(&describe_outcome(t)),
                xml_escape(&t.metric)
            );
        } else if !t.ok {
            w!(
                x,
                "      <failure message=\"{} ({})\"/>\n",
                xml_escape(&describe_outcome(t)),
                xml_escape(&t.metric)
            );
        } else {
            // A pass says what it passed with, too: the figure (which percentile, which value)
            // a CI page shows next to the test's name.
            w!(
                x,
                "      <system-out>{} ({})</system-out>\n",
                xml_escape(&describe_outcome(t)),
                xml_escape(&t.metric)
            );
        }
        x.push_str("    </testcase>\n");
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// Escape text for XML 1.0 element content and for attribute values in either quote.
///
/// The five markup characters become entities (so `]]>` in content cannot end a CDATA-like
/// run either). Tab, newline and carriage return become character references, because a
/// parser turns them into plain spaces inside an attribute. Characters XML 1.0 forbids even
/// as references (the other C0 controls, U+FFFE, U+FFFF) become U+FFFD, so the file stays
/// well-formed and the reader sees that something was there.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::summary::ThresholdResult;

    /// Every character is either markup we wrote or allowed by XML 1.0's `Char` production.
    fn xml_chars_allowed(doc: &str) -> bool {
        doc.chars().all(|c| {
            matches!(c, '\t' | '\n' | '\r')
                || ('\u{20}'..='\u{d7ff}').contains(&c)
                || ('\u{e000}'..='\u{fffd}').contains(&c)
                || c >= '\u{10000}'
        })
    }

    #[test]
    fn escapes_markup_quotes_and_forbidden_characters() {
        assert_eq!(xml_escape("a<b>&\"'c"), "a&lt;b&gt;&amp;&quot;&apos;c");
        assert_eq!(xml_escape("]]>"), "]]&gt;");
        assert_eq!(xml_escape("tab\there\r\n"), "tab&#9;here&#13;&#10;");
        assert_eq!(
            xml_escape("bell\u{7}\u{1}\u{0}"),
            "bell\u{fffd}\u{fffd}\u{fffd}"
        );
        assert_eq!(xml_escape("\u{fffe}\u{ffff}"), "\u{fffd}\u{fffd}");
        assert_eq!(xml_escape("µs ✓ 🎮"), "µs ✓ 🎮");
    }

    /// Hostile names in every field that reaches the XML: the document keeps its structure
    /// (no value opens or closes an attribute or element) and has no character XML forbids.
    #[test]
    fn hostile_names_stay_inside_their_attributes() {
        let hostile = "<x a=\"1\"> & 'q' ]]> \u{1}end";
        let s = Summary {
            schema: 1,
            protocol: hostile.into(),
            transport: String::new(),
            dialect: String::new(),
            scenario: hostile.into(),
            scenario_file: String::new(),
            target: String::new(),
            started_at: hostile.into(),
            duration_s: 1.5,
            interrupted: false,
            aborted: None,
            seed: 0,
            shard: None,
            scenario_hash: None,
            label: None,
            tool_version: None,
            merged_shards: None,
            bots: Default::default(),
            rtt_source: None,
            rtt_us: Default::default(),
            handshake_us: Default::default(),
            snapshot_interarrival_us: Default::default(),
            generator: Default::default(),
            loss: Default::default(),
            loss_method: Default::default(),
            bandwidth: Default::default(),
            inputs_sent: 0,
            snapshots_applied: 0,
            snapshot_rate: None,
            errors: Default::default(),
            source_addresses: None,
            network: None,
            server_metrics: None,
            groups: Default::default(),
            protocol_metrics: Default::default(),
            protocol_metric_info: Default::default(),
            expected: None,
            thresholds: vec![ThresholdResult {
                metric: hostile.into(),
                condition: hostile.into(),
                observed: None,
                ok: false,
                default: false,
                unmeasurable: None,
                skipped: false,
            }],
            verdict: "fail".into(),
            intervals: Vec::new(),
            capacity: None,
            staircase: None,
        };
        let doc = render(&s);
        let escaped = "&lt;x a=&quot;1&quot;&gt; &amp; &apos;q&apos; ]]&gt; \u{fffd}end";
        assert!(doc.contains(&format!("<testsuite name=\"{escaped}\" tests=\"1\"")));
        assert!(doc.contains(&format!(
            "<testcase classname=\"tickswarm.{escaped}\" name=\"{escaped}\">"
        )));
        assert!(doc.contains(&format!(
            "<failure message=\"observed no data ({escaped})\"/>"
        )));
        assert!(!doc.contains(hostile) && !doc.contains("]]>"));
        assert!(xml_chars_allowed(&doc));
        // Only the markup written here: three opening tags, one self-closing failure.
        assert_eq!(doc.matches('<').count(), 1 + 2 + 2 + 2 + 1);
        assert_eq!(doc.matches('"').count() % 2, 0);
    }
}
