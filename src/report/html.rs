//! report.html (placeholder until the full report lands).

use super::summary::Summary;

pub fn render(s: &Summary) -> String {
    format!(
        "<!doctype html><meta charset=utf-8><title>tickswarm</title><pre>{}</pre>",
        serde_json::to_string_pretty(s)
            .unwrap_or_default()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
    )
}
