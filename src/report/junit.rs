//! JUnit XML: one test case per threshold, so CI systems show the gate in their test tab.

use super::build::format_observed;
use super::summary::Summary;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

pub fn render(s: &Summary) -> String {
    let failures = s.thresholds.iter().filter(|t| !t.ok).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    x.push_str(&format!(
        "<testsuites name=\"tickswarm\" tests=\"{}\" failures=\"{}\" time=\"{:.3}\">\n",
        s.thresholds.len(),
        failures,
        s.duration_s
    ));
    x.push_str(&format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" time=\"{:.3}\" timestamp=\"{}\">\n",
        esc(&s.scenario),
        s.thresholds.len(),
        failures,
        s.duration_s,
        esc(&s.started_at)
    ));
    for t in &s.thresholds {
        x.push_str(&format!(
            "    <testcase classname=\"tickswarm.{}\" name=\"{}\">\n",
            esc(&s.protocol),
            esc(&t.condition)
        ));
        if !t.ok {
            x.push_str(&format!(
                "      <failure message=\"observed {} ({})\"/>\n",
                esc(&format_observed(&t.metric, t.observed)),
                esc(&t.metric)
            ));
        }
        x.push_str("    </testcase>\n");
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}
