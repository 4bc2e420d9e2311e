//! `tickswarm init`: a first scenario for a protocol (`--protocol P [--dialect D]`), or the
//! skeleton of a crate for a protocol of one's own (`--protocol-crate NAME`), so a newcomer
//! starts from a file that runs rather than from a copy of another scenario or of the example.
//!
//! The scenario is written from the registry: the protocol's name, its dialects and the option
//! that selects one, every other option at its default, the input rate its clients usually
//! send, and thresholds on the figures that configuration can measure only (`cannot_measure`,
//! `measures_rtt`), so `validate` has nothing to warn about. Before anything is written, the
//! text is parsed and planned as `validate` would.

use std::path::{Path, PathBuf};

use super::{EXIT_PASS, EXIT_USAGE};
use crate::engine;
use crate::protocol::{ProtocolName, ProtocolSection, ServerParams};
use crate::scenario::{self, Metric, Overrides, Plan};

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// The file to write (default: scenario.yaml); with --protocol-crate, the crate's folder
    /// (default: NAME).
    #[arg(value_name = "FILE|DIR")]
    path: Option<PathBuf>,
    /// The protocol the scenario's bots speak (see `tickswarm protocols`).
    #[arg(
        long,
        value_name = "P",
        required_unless_present = "protocol_crate",
        conflicts_with = "protocol_crate"
    )]
    protocol: Option<String>,
    /// The protocol's dialect (see `tickswarm protocols`; default: the protocol's own).
    #[arg(long, value_name = "D", requires = "protocol")]
    dialect: Option<String>,
    /// The server to load: HOST:PORT, a list or range as `run --target` takes (default: the
    /// embedded reference server, so the scenario runs at once).
    #[arg(long, value_name = "HOST:PORT", requires = "protocol")]
    target: Option<String>,
    /// Replace an existing file (a scenario) or write into a folder that is not empty (a crate).
    #[arg(long)]
    force: bool,
    /// Write a crate skeleton for a protocol of one's own named NAME (codec, bot, reference
    /// server, sim tests, a main using tickswarm::main_with, a scenario) instead of a scenario.
    #[arg(long, value_name = "NAME")]
    protocol_crate: Option<String>,
    /// The tickswarm source the crate depends on by path (default: the source this binary was
    /// built from, when it is still there; else a git dependency to fill in).
    #[arg(long, value_name = "DIR", requires = "protocol_crate")]
    tickswarm_path: Option<PathBuf>,
}

pub fn cmd_init(a: &InitArgs) -> anyhow::Result<u8> {
    let result = match &a.protocol_crate {
        Some(name) => init_crate(a, name),
        None => init_scenario(a),
    };
    match result {
        Ok(()) => Ok(EXIT_PASS),
        Err(e) => {
            say!("error: {e}");
            Ok(EXIT_USAGE)
        }
    }
}

fn init_scenario(a: &InitArgs) -> Result<(), String> {
    let name = a.protocol.as_deref().unwrap_or_default();
    let protocol = ProtocolName::find(name).ok_or_else(|| {
        format!(
            "unknown protocol `{name}`; the protocols are {} (see `tickswarm protocols`)",
            ProtocolName::names().join(", ")
        )
    })?;
    let path = a
        .path
        .clone()
        .unwrap_or_else(|| PathBuf::from("scenario.yaml"));
    let g = ScenarioText::new(protocol, a.dialect.as_deref(), a.target.as_deref())?;
    let text = g.render(&path);
    // Checked as `validate` would before anything is written: what init writes must run.
    // A real target is not resolved (a host name this machine cannot see yet is fine).
    let file = scenario::parse(&text, &path)
        .map_err(|e| format!("the generated scenario does not parse (a bug): {e}"))?;
    let ov = Overrides {
        target: g.target.as_ref().map(|_| "127.0.0.1:1".to_string()),
        ..Overrides::default()
    };
    Plan::build(file, &path, &ov)
        .map_err(|e| format!("the generated scenario is not valid (a bug): {e}"))?;
    write_new(&path, text.as_bytes(), a.force)?;
    out!(
        "wrote {}: {} (dialect {}), {} bots against {}",
        path.display(),
        protocol,
        g.section.dialect_name(),
        BOTS,
        g.target_said()
    );
    if let Some(why) = &g.unservable {
        say!(
            "note: no reference server speaks this dialect ({why}); start your server at {} or \
             change `target:`",
            g.target_said()
        );
    }
    out!("next: tickswarm run {}", path.display());
    Ok(())
}

/// Peak population of a first scenario: enough to see a distribution, few enough for any
/// reference server (DarkAges' implementation dialect admits 20 from one /24).
const BOTS: u32 = 20;

/// What a first scenario for one protocol configuration says.
struct ScenarioText {
    protocol: ProtocolName,
    /// The listed dialect chosen (given, or the one the defaults select), if any.
    dialect: Option<&'static str>,
    /// The option that selects it (`dialect`, rtype's `float_order`).
    dialect_key: Option<String>,
    section: ProtocolSection,
    /// `--target`, or a loopback address at the protocol's port when no reference server
    /// speaks the dialect.
    target: Option<String>,
    /// Why the embedded server cannot run this dialect, when it cannot.
    unservable: Option<String>,
}

impl ScenarioText {
    fn new(
        protocol: ProtocolName,
        dialect: Option<&str>,
        target: Option<&str>,
    ) -> Result<Self, String> {
        let info = protocol.info();
        let base = protocol.default_section();
        let listed = super::serve::dialects(protocol);
        let (dialect, dialect_key, section) = match dialect {
            Some(d) => {
                if listed.is_empty() {
                    return Err(format!(
                        "--dialect {d}: {protocol} has no dialects (see `tickswarm protocols`)"
                    ));
                }
                let pair = super::serve::dialect_option(protocol, &base, d)?;
                let section = super::serve::with_options(&base, std::slice::from_ref(&pair))?;
                let d = listed.iter().copied().find(|l| *l == d);
                (d, Some(pair.0), section)
            }
            // The listed dialect the defaults are, so the file names it.
            None => match listed.iter().find_map(|d| {
                let pair = super::serve::dialect_option(protocol, &base, d).ok()?;
                let s = super::serve::with_options(&base, std::slice::from_ref(&pair)).ok()?;
                (s == base).then_some((*d, pair.0))
            }) {
                Some((d, key)) => (Some(d), Some(key), base),
                None => (None, None, base),
            },
        };
        let unservable = section.transport().check_servable().err();
        let target = match (target, &unservable) {
            (Some(t), _) => {
                let t = t.trim();
                if t.is_empty() {
                    return Err("--target is empty: HOST:PORT, or leave it out for the embedded reference server".into());
                }
                Some(t.to_string())
            }
            (None, Some(_)) => Some(format!("127.0.0.1:{}", info.default_port)),
            (None, None) => None,
        };
        Ok(Self {
            protocol,
            dialect,
            dialect_key,
            section,
            target,
            unservable,
        })
    }

    fn target_said(&self) -> String {
        match &self.target {
            Some(t) => t.clone(),
            None => "the embedded reference server".into(),
        }
    }

    /// The page that documents this protocol: the book's for a built-in one, else its spec.
    fn docs(&self) -> String {
        if ProtocolName::ALL.contains(&self.protocol) {
            format!("docs/protocols/{}.md", self.protocol)
        } else {
            self.protocol.info().spec.to_string()
        }
    }

    fn render(&self, path: &Path) -> String {
        let p = self.protocol;
        let info = p.info();
        let s = &self.section;
        let dialect = s.dialect_name();
        let name = match self.dialect {
            Some(d) => format!("{p}-{d}"),
            None => p.to_string(),
        };
        let file = path.display();
        let docs = self.docs();
        let mut t: Vec<String> = Vec::new();
        macro_rules! l {
            ($($arg:tt)*) => { t.push(format!($($arg)*)) };
        }
        t.extend(wrap_comment(&format!(
            "{name}: a first load test of a {p} server (dialect {dialect}), written by \
             `tickswarm init`."
        )));
        l!("#");
        l!("#   tickswarm validate {file}   # check it and print the plan");
        l!("#   tickswarm run {file}        # run it; the report goes to reports/{name}-TIME/");
        l!("#   tickswarm run {file} --bots 200 --duration 1m --target HOST:PORT");
        l!("#");
        l!("# Every key: docs/guide/scenarios.md. Running it and reading the report:");
        l!("# docs/guide/running.md. The protocol and its dialects: {docs}.");
        l!(
            "{}",
            kv(
                &format!("name: {name}"),
                "names the run and its report folder"
            )
        );
        l!("");
        l!("# The protocol the bots speak (`tickswarm protocols` lists them) and its options.");
        l!("protocol:");
        let options = option_lines(s);
        let (shown, intro) = match (self.dialect, &self.dialect_key) {
            (Some(d), Some(key)) => {
                let all: Vec<&str> = info.dialects.iter().map(|(d, _)| *d).collect();
                let what = info
                    .dialects
                    .iter()
                    .find(|(x, _)| *x == d)
                    .map_or("", |(_, w)| *w);
                l!("  {p}:");
                l!(
                    "{}",
                    kv(
                        &format!("    {key}: {d}"),
                        &format!("{}: {}", all.join(" | "), first_words(what, key, d))
                    )
                );
                let others: Vec<&OptionLines> = options.iter().filter(|o| o.key != *key).collect();
                (
                    others,
                    "Its other options, at their defaults (uncomment one to change it):",
                )
            }
            _ if options.is_empty() => {
                l!("  {p}: {{}}");
                (Vec::new(), "")
            }
            _ => {
                l!("  {p}:");
                (
                    options.iter().collect(),
                    "Its options, at their defaults (uncomment one to change it):",
                )
            }
        };
        if !shown.is_empty() {
            l!("    # {intro}");
            for o in shown {
                for x in &o.lines {
                    l!("    # {x}");
                }
            }
        }
        l!("");
        match (&self.target, &self.unservable) {
            (Some(target), Some(why)) => {
                t.extend(wrap_comment(&format!(
                    "No reference server speaks this dialect ({why}). The bots load your \
                     server, here at {p}'s usual port on this machine: HOST:PORT, a port range \
                     HOST:FIRST-LAST, or a list; --target overrides it."
                )));
                l!("target: {}", yaml_string(target));
            }
            (Some(target), None) => {
                l!("# The server under load: HOST:PORT, a port range HOST:FIRST-LAST, or a list;");
                l!("# `embedded` runs the protocol's reference server in this process. --target");
                l!("# overrides it.");
                l!("target: {}", yaml_string(target));
            }
            (None, _) => {
                l!("# `embedded`: the protocol's reference server runs in this process on a loopback");
                l!("# port (as many instances as the bots need), so this runs at once. Your server:");
                l!("# \"HOST:PORT\", a range HOST:FIRST-LAST or a list, or --target on the command line.");
                l!("target: embedded");
            }
        }
        l!("");
        l!("# The embedded reference server (ignored with a server of your own).");
        l!("server:");
        l!(
            "{}",
            kv(
                &format!("  tick_rate: {}", ServerParams::default().tick_rate),
                "simulation ticks per second"
            )
        );
        l!("");
        l!("# How many bots, over time (--bots N scales every stage to a peak of N).");
        l!("population:");
        l!("  stages:");
        l!(
            "{}",
            kv(&format!("    - ramp_to: {BOTS}"), "bots at the peak...")
        );
        l!("{}", kv("      over: 5s", "...reached over this long"));
        l!(
            "{}",
            kv(
                "    - hold: 15s",
                "then held: the steady load the thresholds judge"
            )
        );
        l!("");
        l!("# What each bot does.");
        l!("behaviour:");
        if s.sends_input() {
            let hz = s.usual_input_rate();
            l!(
                "{}",
                kv(
                    &format!("  input_rate: {hz}"),
                    "inputs per second per bot, on a fixed grid"
                )
            );
            l!(
                "{}",
                kv("  pattern:", "idle | random_walk | circle | scripted")
            );
            l!("    random_walk:");
            l!("      change_every: 500ms");
        } else {
            l!("  # No input_rate: this dialect's bots send no input (see the protocol's page).");
        }
        l!(
            "{}",
            kv(
                "  ping_interval: 1s",
                "how often each bot probes the round trip"
            )
        );
        l!("");
        l!("{}", kv("duration: 20s", "run time (--duration overrides)"));
        l!("{}", kv("seed: 42", "same seed, same bot decisions"));
        l!("");
        let (thresholds, left_out) = self.thresholds();
        l!("# The CI gate (docs/guide/thresholds.md): the run exits 1 when one of these fails.");
        for (m, why) in &left_out {
            t.extend(wrap_comment(&format!("No {m} threshold: {why}.")));
        }
        l!("thresholds:");
        for (th, what) in thresholds {
            l!("{}", kv(&format!("  - {th}"), &what));
        }
        let mut text = t.join("\n");
        text.push('\n');
        text
    }

    /// The thresholds this configuration can take, with what each says, and the figures left
    /// out with why.
    fn thresholds(&self) -> (Vec<Labelled>, Vec<Labelled>) {
        let s = &self.section;
        let mut on = Vec::new();
        let mut off = Vec::new();
        match engine::io::rtt_source(s.transport(), s.measures_rtt()) {
            Some("enet_acks") => on.push((
                "rtt p99 < 50ms",
                "round trip, from ENet's acknowledgements (no ping of its own)".to_string(),
            )),
            Some(_) => on.push((
                "rtt p99 < 50ms",
                "round trip of the bots' pings, 99th percentile".to_string(),
            )),
            None => off.push((
                "rtt",
                "neither the dialect nor its transport measures a round trip".to_string(),
            )),
        }
        for (metric, th, what, figure) in [
            (
                Metric::DownstreamLoss,
                "downstream_loss < 1%",
                "server-to-bot datagrams lost",
                "downstream_loss",
            ),
            (
                Metric::UpstreamLoss,
                "upstream_loss < 1%",
                "bot-to-server inputs lost",
                "upstream_loss",
            ),
        ] {
            match s.cannot_measure(metric) {
                None => on.push((th, what.to_string())),
                Some(why) => off.push((figure, why.to_string())),
            }
        }
        on.push((
            "connect_success > 99.9%",
            "bots that completed the handshake".into(),
        ));
        on.push((
            "decode_errors <= 0",
            "datagrams the bots could not decode".into(),
        ));
        (on, off)
    }
}

/// A threshold (or a figure) with what it says (or why it is left out).
type Labelled = (&'static str, String);

/// One top-level option of a protocol section as YAML: its key and its lines (a map or list
/// value takes several).
struct OptionLines {
    key: String,
    lines: Vec<String>,
}

/// The section's options, each at its value, as `serde_saphyr` writes them.
fn option_lines(s: &ProtocolSection) -> Vec<OptionLines> {
    let Ok(yaml) = serde_saphyr::to_string(s) else {
        return Vec::new();
    };
    let mut out: Vec<OptionLines> = Vec::new();
    // The first line is the protocol's name; its options are indented under it.
    let body: Vec<&str> = yaml.lines().skip(1).collect();
    let indent = body
        .iter()
        .map(|l| l.len() - l.trim_start().len())
        .find(|&n| n > 0)
        .unwrap_or(2);
    for l in body {
        if l.trim().is_empty() {
            continue;
        }
        let own = l.len() - l.trim_start().len();
        let text = l.get(indent.min(own)..).unwrap_or(l).to_string();
        if own == indent {
            let key = text.split(':').next().unwrap_or_default().to_string();
            out.push(OptionLines {
                key,
                lines: vec![text],
            });
        } else if let Some(last) = out.last_mut() {
            last.lines.push(text);
        }
    }
    out
}

/// A dialect's description up to its first sentence break, for a short comment (without a
/// leading `KEY: VALUE — ` that repeats the option).
fn first_words(what: &str, key: &str, d: &str) -> String {
    let what = [format!("{key}: {d} — "), format!("dialect: {d} — ")]
        .iter()
        .find_map(|p| what.strip_prefix(p.as_str()))
        .unwrap_or(what);
    let cut = what
        .find(['(', ':', ';'])
        .map_or(what, |i| &what[..i])
        .trim_end_matches([' ', ','])
        .trim();
    if cut.is_empty() {
        what.to_string()
    } else {
        cut.to_string()
    }
}

/// Where the comments after keys start.
const COMMENT_COLUMN: usize = 28;

/// `code` with `comment` after it, at [`COMMENT_COLUMN`] when there is room.
fn kv(code: &str, comment: &str) -> String {
    format!(
        "{code:<w$}# {comment}",
        w = COMMENT_COLUMN.max(code.len() + 1)
    )
}

/// `text` as `# ` comment lines of at most 92 columns.
fn wrap_comment(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::from("#");
    for word in text.split_whitespace() {
        if cur.len() + 1 + word.len() > 92 && cur.len() > 1 {
            out.push(std::mem::replace(&mut cur, String::from("#")));
        }
        cur.push(' ');
        cur.push_str(word);
    }
    out.push(cur);
    out
}

/// `s` as a YAML double-quoted scalar (JSON's string syntax is YAML's).
pub(crate) fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// Write `bytes` to a new file at `path`; an existing one is refused unless `force`.
pub(crate) fn write_new(path: &Path, bytes: &[u8], force: bool) -> Result<(), String> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{} already exists; nothing was written (--force replaces it)",
                path.display()
            )
        } else {
            format!("writing {}: {e}", path.display())
        }
    })?;
    f.write_all(bytes)
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

// ---- --protocol-crate ----------------------------------------------------------------------

/// The skeleton's files: path in the crate, template. `{{name}}` is the protocol's name (and
/// the package's), `{{crate}}` the library's, `{{Marker}}` the marker type's, `{{tickswarm}}`
/// the dependency line.
const CRATE_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../templates/init/crate/Cargo.toml.in"),
    ),
    (
        ".gitignore",
        include_str!("../../templates/init/crate/gitignore.in"),
    ),
    (
        "rustfmt.toml",
        include_str!("../../templates/init/crate/rustfmt.toml.in"),
    ),
    (
        "src/lib.rs",
        include_str!("../../templates/init/crate/lib.rs.in"),
    ),
    (
        "src/main.rs",
        include_str!("../../templates/init/crate/main.rs.in"),
    ),
    (
        "tests/sim.rs",
        include_str!("../../templates/init/crate/sim.rs.in"),
    ),
    (
        "{{name}}.yaml",
        include_str!("../../templates/init/crate/scenario.yaml.in"),
    ),
];

/// Names a crate or a protocol cannot take: the built-in protocols (registering one again
/// under another marker fails), the dependency itself, and Rust's keywords.
fn check_crate_name(name: &str) -> Result<(), String> {
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64;
    if !ok {
        return Err(format!(
            "--protocol-crate {name}: the name is the protocol's name in scenarios and the \
             crate's: lower-case letters, digits, - or _, starting with a letter"
        ));
    }
    if ProtocolName::ALL.iter().any(|p| p.as_str() == name) {
        return Err(format!(
            "--protocol-crate {name}: a built-in protocol has that name (see `tickswarm \
             protocols`); pick another"
        ));
    }
    const TAKEN: &[&str] = &[
        "tickswarm",
        "serde",
        "test",
        "std",
        "core",
        "alloc",
        "proc_macro",
        "as",
        "async",
        "await",
        "break",
        "const",
        "continue",
        "crate",
        "dyn",
        "else",
        "enum",
        "extern",
        "false",
        "fn",
        "for",
        "if",
        "impl",
        "in",
        "let",
        "loop",
        "match",
        "mod",
        "move",
        "mut",
        "pub",
        "ref",
        "return",
        "self",
        "static",
        "struct",
        "super",
        "trait",
        "true",
        "type",
        "unsafe",
        "use",
        "where",
        "while",
        "abstract",
        "become",
        "box",
        "do",
        "final",
        "gen",
        "macro",
        "override",
        "priv",
        "try",
        "typeof",
        "unsized",
        "virtual",
        "yield",
    ];
    if TAKEN.contains(&name.replace('-', "_").as_str()) {
        return Err(format!(
            "--protocol-crate {name}: a Rust keyword or a crate the skeleton depends on; pick \
             another name"
        ));
    }
    Ok(())
}

/// `my-game` → `MyGame`.
fn marker_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The source this binary was built from, when it is still there.
fn built_from() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    p.join("Cargo.toml").is_file().then_some(p)
}

/// The `tickswarm = ...` dependency line (with its comment), and the path it names if any.
fn tickswarm_dependency(given: Option<&Path>) -> Result<(String, Option<PathBuf>), String> {
    let path = match given {
        Some(p) => {
            if !p.join("Cargo.toml").is_file() {
                return Err(format!(
                    "--tickswarm-path {}: no Cargo.toml there; name the folder of tickswarm's \
                     source (the one with its Cargo.toml)",
                    p.display()
                ));
            }
            Some(p.to_path_buf())
        }
        None => built_from(),
    };
    Ok(match path {
        Some(p) => {
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            let line = format!(
                "# tickswarm's source on this machine (no registry release yet); a team's copy\n\
                 # names a git URL and commit instead: tickswarm = {{ git = \"...\", rev = \"...\" }}\n\
                 tickswarm = {{ path = {} }}",
                toml_string(&p.to_string_lossy())
            );
            (line, Some(p))
        }
        None => (
            "# No tickswarm source was found on this machine and there is no registry release yet:\n\
             # replace GIT_URL with the address you clone tickswarm from (your mirror or fork) and\n\
             # COMMIT with the full hash of the commit to build on (`git rev-parse HEAD` in a\n\
             # checkout of it), or write `tickswarm = { path = \"/path/to/tickswarm\" }`.\n\
             tickswarm = { git = \"GIT_URL\", rev = \"COMMIT\" }"
                .to_string(),
            None,
        ),
    })
}

fn init_crate(a: &InitArgs, name: &str) -> Result<(), String> {
    check_crate_name(name)?;
    let dir = a.path.clone().unwrap_or_else(|| PathBuf::from(name));
    let (dependency, source) = tickswarm_dependency(a.tickswarm_path.as_deref())?;
    let files = crate_files(name, &dependency);
    // A folder with files in it is refused unless --force (then only the skeleton's files are
    // replaced); nothing is written before that is known.
    match std::fs::read_dir(&dir) {
        Ok(mut entries) => {
            if entries.next().is_some() && !a.force {
                return Err(format!(
                    "{} is not empty; nothing was written (--force writes the skeleton's files \
                     into it, replacing those of the same name)",
                    dir.display()
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    for (rel, text) in &files {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    out!(
        "wrote {}: the crate {name}, protocol `{name}` ({})",
        dir.display(),
        files
            .iter()
            .map(|(f, _)| f.as_str())
            .filter(|f| !f.starts_with('.'))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match source {
        Some(p) => out!("tickswarm from {}", p.display()),
        None => say!(
            "note: {}: fill in tickswarm's GIT_URL and COMMIT (or a path) before building",
            dir.join("Cargo.toml").display()
        ),
    }
    out!(
        "next: cd {} && cargo test && cargo run -- run {name}.yaml",
        dir.display()
    );
    Ok(())
}

/// The skeleton's files with the placeholders filled in.
fn crate_files(name: &str, dependency: &str) -> Vec<(String, String)> {
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{Marker}}", &marker_name(name))
            .replace("{{tickswarm}}", dependency)
    };
    CRATE_FILES
        .iter()
        .map(|(p, t)| (fill(p), fill(t)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: ProtocolName, d: Option<&str>, target: Option<&str>) -> String {
        ScenarioText::new(p, d, target)
            .unwrap()
            .render(Path::new("s.yaml"))
    }

    #[test]
    fn every_protocol_and_dialect_gives_a_scenario_that_plans() {
        for p in ProtocolName::ALL {
            let mut dialects: Vec<Option<&str>> =
                p.info().dialects.iter().map(|(d, _)| Some(*d)).collect();
            dialects.push(None);
            for d in dialects {
                let t = text(*p, d, None);
                let file = scenario::parse(&t, Path::new("s.yaml"))
                    .unwrap_or_else(|e| panic!("{p} {d:?}: {e}\n{t}"));
                assert_eq!(file.protocol.name(), *p);
                if let Some(d) = d {
                    assert!(file.protocol.dialect_name().ends_with(d), "{p} {d}");
                }
                let ov = Overrides {
                    target: (!t.contains("target: embedded")).then(|| "127.0.0.1:1".into()),
                    ..Overrides::default()
                };
                let plan = Plan::build(file, Path::new("s.yaml"), &ov)
                    .unwrap_or_else(|e| panic!("{p} {d:?}: {e}\n{t}"));
                // No threshold on a figure the configuration cannot take.
                assert!(
                    super::super::unmeasurable_thresholds(&plan).is_empty(),
                    "{p} {d:?}:\n{t}"
                );
            }
        }
    }

    #[test]
    fn the_commented_options_are_the_defaults_and_parse_uncommented() {
        for p in ProtocolName::ALL {
            for (d, _) in p.info().dialects {
                let t = text(*p, Some(d), None);
                let open: String = t
                    .lines()
                    .map(|l| match l.strip_prefix("    # ") {
                        Some(o) if !o.starts_with("Its ") => format!("    {o}\n"),
                        _ => format!("{l}\n"),
                    })
                    .collect();
                let a = scenario::parse(&t, Path::new("s.yaml")).unwrap();
                let b = scenario::parse(&open, Path::new("s.yaml"))
                    .unwrap_or_else(|e| panic!("{p} {d}: {e}\n{open}"));
                assert_eq!(a.protocol, b.protocol, "{p} {d}");
            }
        }
    }

    #[test]
    fn thresholds_follow_what_the_dialect_measures() {
        let cafe = text(ProtocolName::Cafe, Some("spec"), None);
        assert!(cafe.contains("- rtt p99 < 50ms"));
        assert!(cafe.contains("- downstream_loss < 1%"));
        assert!(!cafe.contains("- upstream_loss"), "{cafe}");
        assert!(cafe.contains("# No upstream_loss threshold: a cafe server acknowledges no input."));
        let bench = text(ProtocolName::ZergCity, Some("benchmark"), None);
        assert!(bench.contains("RTT") || bench.contains("ENet's acknowledgements"));
        assert!(
            !bench.lines().any(|l| l.starts_with("  input_rate:")),
            "{bench}"
        );
        let zc = text(ProtocolName::ZergCity, Some("spec"), None);
        assert!(zc.contains("input_rate: 5 "), "{zc}");
        let rtype = text(ProtocolName::Rtype, Some("implementation"), None);
        assert!(!rtype.contains("downstream_loss <"), "{rtype}");
        assert!(rtype.contains("target: \"127.0.0.1:"), "{rtype}");
    }

    #[test]
    fn a_target_is_quoted_and_a_bad_dialect_names_the_good_ones() {
        let t = text(ProtocolName::Cafe, None, Some("10.0.0.5:4242"));
        assert!(t.contains("target: \"10.0.0.5:4242\""), "{t}");
        let e = ScenarioText::new(ProtocolName::City, Some("nope"), None)
            .err()
            .unwrap();
        assert!(e.contains("spec, implementation"), "{e}");
    }

    #[test]
    fn crate_names_and_markers() {
        assert_eq!(marker_name("my-game_2"), "MyGame2");
        assert!(check_crate_name("skirmish").is_ok());
        assert!(check_crate_name("cafe").is_err());
        assert!(check_crate_name("Bad").is_err());
        assert!(check_crate_name("self").is_err());
        assert!(check_crate_name("tickswarm").is_err());
        let files = crate_files("my-game", "tickswarm = { path = \"/x\" }");
        for (p, t) in &files {
            assert!(!t.contains("{{") && !p.contains("{{"), "{p}");
        }
        assert!(files.iter().any(|(p, _)| p == "my-game.yaml"));
        assert_eq!(toml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
