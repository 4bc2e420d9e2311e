//! Scenario files: YAML in, a validated [`Plan`] out.
//!
//! Parsing is strict: unknown keys are rejected (with a suggestion when a known key is close),
//! and every error names the file, line and column.

pub mod capacity;
mod file;
pub mod groups;
pub mod lifecycle;
pub mod plan;
pub mod server_metrics;
pub mod sockets;
pub mod source_pool;

use std::path::{Path, PathBuf};

use thiserror::Error;

pub use crate::duration::{format_duration, parse_duration, Dur};
pub use crate::metrics::threshold::{self, Metric, Threshold};
pub use crate::protocol::{ProtocolSection, ServerParams as ServerSection};
pub use file::{
    Behaviour, CompareSection, EngineSection, InputMode, OutputSection, PatternSpec, ScenarioFile,
    Stage, Target,
};
pub use groups::{GroupSize, GroupSpec};
pub use plan::{GroupPlan, Overrides, Plan, Shard, SpawnEvent, SpawnKind, StopKind};
pub use source_pool::SourcePool;

#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A YAML or schema error, already rendered with file, line, column and a snippet.
    #[error("{0}")]
    Parse(String),
    /// A rule that spans several keys (no single location).
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The largest scenario file read (1 MiB; the shipped ones are under 4 KiB). A path such as
/// `/dev/zero`, a FIFO or a mistaken log file must give an error, not fill the memory.
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// Read and parse a scenario file.
pub fn load(path: &Path) -> Result<ScenarioFile, ScenarioError> {
    let text = read_bounded(path).map_err(|source| ScenarioError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

/// The file's text, refusing one longer than [`MAX_SCENARIO_BYTES`] (read through a limit,
/// not by its reported size: devices and pipes report none).
pub fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "longer than {} KiB; a scenario is a short YAML file",
                MAX_SCENARIO_BYTES / 1024
            ),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Parse scenario text; `path` is only used in messages.
pub fn parse(text: &str, path: &Path) -> Result<ScenarioFile, ScenarioError> {
    if text.trim().is_empty() {
        return Err(ScenarioError::Parse(format!(
            "{}: the scenario file is empty; start from scenarios/quickstart.yaml",
            path.display()
        )));
    }
    let file = serde_saphyr::from_str::<ScenarioFile>(text).map_err(|e| {
        let shown = path.display().to_string();
        let mut msg = e.to_string().replace("<input>", &shown);
        // "error: line 4 column 3: ..." -> "scenario.yaml:4:3: ..." so editors can jump to it.
        if let Some(rest) = msg.strip_prefix("error: line ") {
            if let Some((line, rest)) = rest.split_once(" column ") {
                if let Some((col, rest)) = rest.split_once(": ") {
                    msg = format!("{shown}:{line}:{col}: {rest}");
                }
            }
        }
        // The parser names Rust's types; a scenario's author thinks in numbers.
        for (rust, plain) in [
            ("invalid u64", "expected a whole number (0 or more)"),
            ("invalid u32", "expected a whole number (0 or more)"),
            ("invalid u16", "expected a whole number from 0 to 65535"),
            ("invalid u8", "expected a whole number from 0 to 255"),
            ("invalid usize", "expected a whole number (0 or more)"),
            ("invalid f64", "expected a number"),
            ("invalid f32", "expected a number"),
        ] {
            msg = msg.replace(rust, plain);
        }
        if let Some(hint) = suggest_key(&msg) {
            msg.push_str(&format!("\nhelp: did you mean `{hint}`?"));
        }
        ScenarioError::Parse(msg)
    })?;
    check_threshold_groups(&file, text, path)?;
    Ok(file)
}

/// Every group a threshold names is one of the scenario's `groups:`; otherwise the error
/// points at the threshold's line and column (found as the threshold's text in the file).
fn check_threshold_groups(
    file: &ScenarioFile,
    text: &str,
    path: &Path,
) -> Result<(), ScenarioError> {
    let names: Vec<&str> = file
        .groups
        .iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    for t in &file.thresholds {
        let Some(group) = &t.group else { continue };
        if names.contains(&group.as_str()) {
            continue;
        }
        let known = if names.is_empty() {
            "the scenario has no `groups:`".to_string()
        } else {
            format!("its groups are {}", names.join(", "))
        };
        let at = text
            .find(t.text.as_str())
            .map(|i| {
                let before = &text[..i];
                let line = before.matches('\n').count() + 1;
                let col = i - before.rfind('\n').map_or(0, |n| n + 1) + 1;
                format!("{line}:{col}:")
            })
            .unwrap_or_default();
        return Err(ScenarioError::Parse(format!(
            "{}:{at} threshold `{}` names group `{group}`, but {known}",
            path.display(),
            t.text
        )));
    }
    Ok(())
}

/// For "unknown field (or variant) `x`, expected one of a, b": the closest known name, if it
/// is close.
fn suggest_key(msg: &str) -> Option<String> {
    // Unknown keys, and unknown variants: a misspelt protocol name (`cafee:`), input mode
    // or pattern.
    let rest = msg
        .split("unknown field `")
        .nth(1)
        .or_else(|| msg.split("unknown variant `").nth(1))?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest
        .split("expected one of ")
        .nth(1)
        .or_else(|| rest.split("expected ").nth(1))?;
    let first_line = expected.lines().next()?;
    first_line
        .split(',')
        .map(|k| k.trim().trim_matches('`'))
        .filter(|k| !k.is_empty())
        .map(|k| (strsim::jaro_winkler(unknown, k), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestion_for_a_close_key() {
        let m = "x.yaml:3:1: unknown field `durration`, expected one of name, duration, seed";
        assert_eq!(suggest_key(m).as_deref(), Some("duration"));
        let m = "unknown field `zzz`, expected one of name, duration";
        assert_eq!(suggest_key(m), None);
        let m = "x.yaml:3:3: unknown variant `cafee`, expected one of cafe, rtype, city";
        assert_eq!(suggest_key(m).as_deref(), Some("cafe"));
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn quickstart_parses() {
        let p = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/quickstart.yaml"
        ));
        let f = load(p).unwrap();
        let plan = Plan::build(f, p, &Overrides::default()).unwrap();
        assert_eq!(plan.planned, 100);
        // The scenario's three, and the six default checks.
        assert_eq!(plan.thresholds.len(), 9);
        assert_eq!(plan.thresholds.iter().filter(|t| t.default).count(), 6);
    }

    /// A bad value inside `network:` (both-ways fields, and `up:`/`down:`) is reported at its
    /// own line and column, not at the start of the mapping.
    #[test]
    fn a_bad_network_value_names_its_own_line_and_column() {
        let head = "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages: []\nnetwork:\n";
        for (body, at) in [
            ("  latency: 20ms\n  loss: lots\n", "s.yaml:8:9"),
            ("  latency: 20ms\n  laggy: 5ms\n", "s.yaml:8:3"),
            ("  up:\n    latency: fast\n", "s.yaml:8:14"),
        ] {
            let e = parse(&format!("{head}{body}"), Path::new("s.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(at), "want {at}: {e}");
        }
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let text = "name: x\nprotocol:\n  cafe:\n    dialectt: spec\npopulation:\n  stages: []\n";
        let e = parse(text, Path::new("s.yaml")).unwrap_err().to_string();
        eprintln!("{e}");
        assert!(e.contains("s.yaml:4:"), "{e}");
        let text = "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 5\n";
        let e = parse(text, Path::new("s.yaml")).unwrap_err().to_string();
        eprintln!("{e}");
        assert!(e.contains("s.yaml:7:"), "{e}");
        let text = "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages: []\nthresholds:\n  - rtt < 5ms\n";
        let e = parse(text, Path::new("s.yaml")).unwrap_err().to_string();
        eprintln!("{e}");
        assert!(e.contains("s.yaml:7:"), "{e}");
        let text = "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages: []\ndurration: 5s\n";
        let e = parse(text, Path::new("s.yaml")).unwrap_err().to_string();
        eprintln!("{e}");
        assert!(e.contains("did you mean `duration`"), "{e}");
    }
}
