//! The crate's layers point down only (the picture in `src/lib.rs`, which must match this one,
//! and in `docs/dev/architecture.md`):
//!
//! ```text
//!               api
//!                ▼
//!               cli
//!         ┌──────┼──────┐
//!         ▼      ▼      ▼
//!       engine capture report
//!     ┌───┴────┐ │      │
//!     ▼        ▼ ▼      │
//! scenario  transport   │
//!   │   ▼      │        │
//!   │ games    │        │
//!   │   └──┬───┘        │
//!   │      ▼            │
//!   │   protocol        │
//!   │      ▼            │
//!   │   metrics ◄───────┤
//!   ▼      │            │
//! netsim ◄─┼────────────┘
//!   └──┬───┘
//!      ▼
//!   duration
//! ```
//!
//! A module may name (`crate::<module>`) only the modules it reaches along the arrows. This
//! test reads the sources, so an import that points up (or sideways, such as report -> engine) fails here
//! before it becomes a cycle.

use std::collections::BTreeMap;
use std::path::Path;

/// Each top-level module and the modules it may use.
const ALLOWED: &[(&str, &[&str])] = &[
    // The public API: re-exports of the protocol prelude and the CLI's entry point.
    ("api", &["cli", "games", "protocol"]),
    (
        "cli",
        &[
            "report",
            "capture",
            "engine",
            "scenario",
            "transport",
            "games",
            "protocol",
            "metrics",
            "netsim",
            "duration",
        ],
    ),
    (
        "engine",
        &[
            "scenario",
            "transport",
            "games",
            "protocol",
            "metrics",
            "netsim",
            "duration",
        ],
    ),
    // Captures of real clients: flows read as every protocol (the catalogue in games, ENet's
    // framing in transport).
    (
        "capture",
        &["transport", "games", "protocol", "metrics", "duration"],
    ),
    (
        "scenario",
        &["games", "protocol", "metrics", "netsim", "duration"],
    ),
    ("transport", &["protocol", "metrics", "duration"]),
    // The games use the toolkit (and through its prelude, metrics and duration) only.
    ("games", &["protocol", "metrics", "duration"]),
    ("protocol", &["metrics", "duration"]),
    ("report", &["metrics", "netsim", "duration"]),
    ("metrics", &["duration"]),
    ("netsim", &["duration"]),
    ("duration", &[]),
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `crate::<name>` references in `text`, outside line comments.
fn crate_refs(text: &str) -> Vec<String> {
    let mut refs = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                // `use crate::{a, b::c}`: every first segment in the group.
                let inner = group.split('}').next().unwrap_or_default();
                for item in inner.split(',') {
                    let name = item.trim().split("::").next().unwrap_or_default();
                    if !name.is_empty() {
                        refs.push(name.to_string());
                    }
                }
            }
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.push(name);
            }
            rest = after;
        }
    }
    refs
}

#[test]
fn modules_import_only_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut violations = Vec::new();
    let mut checked = 0;
    for (module, ok) in &allowed {
        let mut files = Vec::new();
        let dir = src.join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let single = src.join(format!("{module}.rs"));
        if single.is_file() {
            files.push(single);
        }
        assert!(!files.is_empty(), "no sources for module `{module}`");
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read a source file");
            checked += 1;
            for r in crate_refs(&text) {
                let is_module = allowed.contains_key(r.as_str());
                if is_module && r != *module && !ok.contains(&r.as_str()) {
                    violations.push(format!("{} uses crate::{r}", f.display()));
                }
            }
        }
    }
    assert!(checked > 20, "read only {checked} files");
    assert!(
        violations.is_empty(),
        "imports that point up a layer:\n{}",
        violations.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read lib.rs");
    for line in lib.lines() {
        if let Some(name) = line.trim().strip_prefix("pub mod ") {
            let name = name.trim_end_matches(';');
            assert!(
                ALLOWED.iter().any(|(m, _)| *m == name),
                "src/lib.rs declares `{name}`, which has no place in the layer table"
            );
        }
    }
}

/// The first ```text block of a doc comment (`//!` lines).
fn diagram(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "```text")
        .expect("a ```text block");
    let len = lines[start + 1..]
        .iter()
        .position(|l| l.trim() == "```")
        .expect("the block's end");
    lines[start + 1..start + 1 + len].join("\n")
}

#[test]
fn the_crate_docs_draw_the_layers_this_test_enforces() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("read lib.rs");
    let this = std::fs::read_to_string(root.join("tests/it/layers.rs")).expect("read layers.rs");
    assert_eq!(
        diagram(&lib),
        diagram(&this),
        "src/lib.rs and tests/it/layers.rs draw different layers"
    );
}

/// The built-in protocols (every folder under `src/games/`) are written against the public
/// protocol API only, as a protocol in a user's crate is: each `crate::` path in them goes
/// through `crate::protocol::prelude` (what `tickswarm::api` re-exports) or stays inside the
/// game's own folder, and a folder's `mod.rs` names nothing through `super::` (which
/// would be `crate::games`, the catalogue, around the prelude); a nested folder's `mod.rs`
/// reaches its game through `super::` as any other file does.
#[test]
fn built_in_protocols_use_only_the_public_api() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/games");
    let mut folders: Vec<_> = std::fs::read_dir(&root)
        .expect("read src/games")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    assert!(folders.len() >= 5, "found only {folders:?}");
    let mut violations = Vec::new();
    let mut checked = 0;
    for folder in &folders {
        let name = folder
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let own = format!("games::{name}");
        let mut files = Vec::new();
        rust_files(folder, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read a source file");
            checked += 1;
            // Only the game's own `mod.rs` has `crate::games` as its `super`.
            let is_mod = f == folder.join("mod.rs");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for (i, _) in code.match_indices("crate::") {
                    let path = &code[i + "crate::".len()..];
                    if !(path.starts_with("protocol::prelude") || path.starts_with(&own)) {
                        violations.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                    }
                }
                // `super::` in a folder's mod.rs is `crate::games`; `use super::*;` in its
                // test module (indented) is the folder itself.
                if is_mod && code.starts_with("use super::") {
                    violations.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(checked > 20, "read only {checked} files");
    assert!(
        violations.is_empty(),
        "built-in protocols reaching past the public API (use crate::protocol::prelude):\n{}",
        violations.join("\n")
    );
}

/// What the prelude re-exports is the public API: it names no internal module.
#[test]
fn the_prelude_reexports_no_internal_module() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocol/prelude.rs"),
    )
    .expect("read prelude.rs");
    for internal in ["engine", "transport", "scenario", "report", "cli"] {
        assert!(
            !text.contains(&format!("crate::{internal}")),
            "prelude.rs re-exports from crate::{internal}"
        );
    }
}

/// Dialects that are readings of the spec document itself (a float order, a struct read as
/// printed), spoken by the game's own codec, bot and server; every other dialect is another
/// server's format and lives in `dialects/<dialect>/`.
const SPEC_READINGS: &[(&str, &str)] = &[
    ("rtype", "big"),
    ("rtype", "little"),
    ("darkages", "struct_as_printed"),
];

/// Every game has one folder shape: `mod.rs` (the `Protocol` impl and its options),
/// `info.rs` (the metric table), `codec/`, `bot/`, `server/`, and `dialects/<dialect>/` for
/// each dialect that is another server's format, named as scenarios name it; `world/` only
/// where bot and server share a model of the world. A newcomer who knows one game knows
/// where everything is in the others.
#[test]
fn every_game_has_the_same_folder_shape() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/games");
    let mut problems = Vec::new();
    for p in tickswarm::api::ProtocolName::ALL {
        let info = p.info();
        let dir = root.join(info.name);
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for e in std::fs::read_dir(&dir)
            .expect("read a game's folder")
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                dirs.push(name);
            } else {
                files.push(name);
            }
        }
        files.sort();
        if files != ["info.rs", "mod.rs"] {
            problems.push(format!(
                "{}: files {files:?}, want mod.rs and info.rs only",
                info.name
            ));
        }
        for needed in ["codec", "bot", "server"] {
            if !dir.join(needed).join("mod.rs").is_file() {
                problems.push(format!("{}: no {needed}/mod.rs", info.name));
            }
        }
        for d in &dirs {
            if !["codec", "bot", "server", "dialects", "world"].contains(&d.as_str()) {
                problems.push(format!("{}: folder {d}/ is not in the template", info.name));
            }
        }
        // A game with only the spec's dialects has no `dialects/` folder; any other error
        // reading it fails the test.
        let mut folders: Vec<String> = match std::fs::read_dir(dir.join("dialects")) {
            Ok(r) => r
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{}: {e}", dir.join("dialects").display()),
        };
        folders.sort();
        let mut others: Vec<String> = info
            .dialects
            .iter()
            .map(|(d, _)| *d)
            .filter(|d| *d != "spec" && !SPEC_READINGS.contains(&(info.name, *d)))
            .map(str::to_owned)
            .collect();
        others.sort();
        if folders != others {
            problems.push(format!(
                "{}: dialect folders {folders:?}, dialects other than the spec's {others:?}",
                info.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
