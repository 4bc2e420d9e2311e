//! `tickswarm init`: the scenario it writes for every protocol and dialect passes `validate`,
//! cafe's runs and passes at once, an existing file is kept unless `--force`, a wrong
//! protocol or dialect names the right ones; `--protocol-crate` writes a crate skeleton
//! (that the skeleton builds and passes its own tests is .ci/run's step 16: minutes of
//! compiling).

use std::path::Path;
use std::process::{Command, Output};

use crate::common::summary::{finish, run_command};

fn tickswarm(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .current_dir(dir)
        .args(args)
        .env_remove("TICKSWARM_FORCE")
        .env_remove("TICKSWARM_QUIET")
        .env_remove("TICKSWARM_JSON")
        .env_remove("TICKSWARM_OUT")
        .env_remove("TICKSWARM_TARGET")
        .env_remove("TICKSWARM_BOTS")
        .env_remove("TICKSWARM_DURATION")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every protocol with its dialects, as `tickswarm protocols` lists them.
fn protocols(dir: &Path) -> Vec<(String, Vec<String>)> {
    let o = tickswarm(dir, &["protocols"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        if let Some(d) = line.strip_prefix("  dialect ") {
            let d = d.split_whitespace().next().unwrap().to_string();
            out.last_mut().unwrap().1.push(d);
        } else if !line.is_empty() && !line.starts_with(' ') {
            out.push((line.split(' ').next().unwrap().to_string(), Vec::new()));
        }
    }
    out
}

#[test]
fn init_writes_a_valid_scenario_for_every_protocol_and_dialect() {
    let tmp = tempfile::tempdir().unwrap();
    let all = protocols(tmp.path());
    assert!(all.len() >= 5, "{all:?}");
    let mut checked = 0;
    for (p, dialects) in &all {
        assert!(!dialects.is_empty(), "{p}");
        let mut cases: Vec<Option<&str>> = dialects.iter().map(|d| Some(d.as_str())).collect();
        cases.push(None);
        for d in cases {
            let file = format!("{p}-{}.yaml", d.unwrap_or("default"));
            let mut args = vec!["init", &file, "--protocol", p];
            if let Some(d) = d {
                args.extend(["--dialect", d]);
            }
            let o = tickswarm(tmp.path(), &args);
            assert_eq!(o.status.code(), Some(0), "{p} {d:?}: {}", text(&o));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                out.contains(&format!("wrote {file}"))
                    && out.contains(&format!("next: tickswarm run {file}")),
                "{out}"
            );
            let v = tickswarm(tmp.path(), &["validate", &file]);
            assert_eq!(v.status.code(), Some(0), "{p} {d:?}: {}", text(&v));
            let err = String::from_utf8_lossy(&v.stderr);
            // No threshold on a figure the configuration cannot measure.
            assert!(!err.contains("warning"), "{p} {d:?}: {err}");
            let yaml = std::fs::read_to_string(tmp.path().join(&file)).unwrap();
            assert!(yaml.contains(&format!("protocol:\n  {p}:")), "{yaml}");
            if let Some(d) = d {
                assert!(yaml.contains(&format!(": {d} ")), "{p} {d}: {yaml}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 18, "{checked}");
}

#[test]
fn a_cafe_scenario_from_init_runs_and_passes_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tickswarm(tmp.path(), &["init", "--protocol", "cafe"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(tmp.path().join("scenario.yaml").is_file());
    // As a newcomer types it: relative paths, in the folder init wrote to.
    let r = run_command(
        Path::new("scenario.yaml"),
        &["--duration", "2s", "--bots", "5"],
        Path::new("out"),
    )
    .current_dir(tmp.path())
    .output()
    .unwrap();
    let s = finish(&r, &tmp.path().join("out"), &[0]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("PASS"), "{err}");
    for f in ["summary.json", "report.html"] {
        assert!(tmp.path().join("out").join(f).is_file(), "{f}");
    }
    assert_eq!(s["verdict"], "pass");
    assert_eq!(s["scenario"], "cafe-spec");
}

#[test]
fn init_keeps_an_existing_file_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("scenario.yaml");
    std::fs::write(&f, "mine\n").unwrap();
    let o = tickswarm(tmp.path(), &["init", "--protocol", "cafe"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("scenario.yaml already exists") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "mine\n");
    let o = tickswarm(
        tmp.path(),
        &[
            "init",
            "--protocol",
            "city",
            "--force",
            "--target",
            "10.0.0.5:7777",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let yaml = std::fs::read_to_string(&f).unwrap();
    assert!(yaml.contains("target: \"10.0.0.5:7777\""), "{yaml}");
    assert!(yaml.contains("  city:"), "{yaml}");
}

#[test]
fn init_names_the_protocols_and_dialects_when_one_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tickswarm(tmp.path(), &["init", "--protocol", "quake"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown protocol `quake`")
            && err.contains("cafe, rtype, city, zergcity, darkages"),
        "{err}"
    );
    let o = tickswarm(
        tmp.path(),
        &["init", "--protocol", "zergcity", "--dialect", "poc"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("zergcity has no dialect `poc`")
            && err.contains("spec, implementation, benchmark"),
        "{err}"
    );
    // Neither --protocol nor --protocol-crate: clap's usage error.
    let o = tickswarm(tmp.path(), &["init"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none());
}

#[test]
fn init_protocol_crate_writes_a_skeleton_on_the_public_api() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = env!("CARGO_MANIFEST_DIR");
    let o = tickswarm(
        tmp.path(),
        &[
            "init",
            "--protocol-crate",
            "my-game",
            "--tickswarm-path",
            repo,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("next: cd my-game && cargo test && cargo run -- run my-game.yaml"),
        "{out}"
    );
    let dir = tmp.path().join("my-game");
    for f in [
        "Cargo.toml",
        ".gitignore",
        "rustfmt.toml",
        "src/lib.rs",
        "src/main.rs",
        "tests/sim.rs",
        "my-game.yaml",
    ] {
        let t = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!t.contains("{{"), "{f}: a placeholder left:\n{t}");
    }
    let toml = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let canonical = std::fs::canonicalize(repo).unwrap();
    assert!(
        toml.contains(&format!(
            "tickswarm = {{ path = \"{}\" }}",
            canonical.display()
        )),
        "{toml}"
    );
    assert!(toml.contains("name = \"my-game\""), "{toml}");
    let main = std::fs::read_to_string(dir.join("src/main.rs")).unwrap();
    assert!(
        main.contains("tickswarm::main_with(&[&my_game::MyGame])"),
        "{main}"
    );
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
    assert!(lib.contains("name: \"my-game\""), "{lib}");
    // No tickswarm that the crate would import from outside its public API.
    assert!(!lib.contains("tickswarm::games") && !lib.contains("tickswarm::engine"));

    // Written again: refused, the folder is not empty; --force rewrites it.
    let o = tickswarm(tmp.path(), &["init", "--protocol-crate", "my-game"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not empty"));
    let o = tickswarm(
        tmp.path(),
        &["init", "--protocol-crate", "my-game", "--force"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // A built-in protocol's name, or a name cargo would refuse, is refused.
    for bad in ["cafe", "My", "self"] {
        let o = tickswarm(tmp.path(), &["init", "--protocol-crate", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(!tmp.path().join(bad).exists(), "{bad}");
    }
    // A --tickswarm-path with no Cargo.toml.
    let o = tickswarm(
        tmp.path(),
        &[
            "init",
            "--protocol-crate",
            "other",
            "--tickswarm-path",
            tmp.path().to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no Cargo.toml there"));
}
