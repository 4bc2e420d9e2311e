//! The documentation's links hold: every relative link and `#anchor` in `README.md` and in
//! the book (`docs/**/*.md`) names a file that exists and, for a Markdown page, a heading it
//! has. The book is also a web site (mdBook renders `docs/` to HTML), so a page in `docs/`
//! links only within `docs/`, and every page is in `docs/SUMMARY.md` (a page left out is not
//! rendered, and links to it break on the site).
//!
//! Anchors are the ids both GitHub and mdBook give a heading: its text lower-cased, spaces
//! as `-`, every character but letters, digits, `-` and `_` dropped, and a repeated id
//! suffixed `-1`, `-2`, ... . CI also builds the book (`mdbook build docs`, `.ci/run`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every `.md` file under `docs/`.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files
}

/// The lines of `text` outside fenced code blocks (```` ``` ```` or `~~~`), with their
/// 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` with every code span (text between backticks) blanked out, so that
/// `` `[a](b)` `` is not taken for a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The id GitHub and mdBook give a heading with this text.
fn slug(heading: &str) -> String {
    // Inline markup is not part of the id: code spans keep their text, links their label.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        text.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        rest = after.find(')').map_or("", |j| &after[j + 1..]);
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The anchors a Markdown file defines: its headings' ids, and `<a id=...>`/`<a name=...>`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        if t.starts_with('#') {
            let title = t.trim_start_matches('#');
            if title.starts_with(' ') || title.is_empty() {
                let base = slug(title.trim());
                let n = seen.entry(base.clone()).or_insert(0);
                let id = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                *n += 1;
                out.insert(id);
            }
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(attr) {
                let after = &rest[i + attr.len()..];
                if let Some(j) = after.find('"') {
                    out.insert(after[..j].to_string());
                }
                rest = after;
            }
        }
    }
    out
}

/// A link found in a Markdown file: its line and its target as written.
struct Link {
    line: usize,
    target: String,
}

/// Inline links and images (`[text](target)`, `![alt](target)`) and reference definitions
/// (`[label]: target`), outside code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    for (n, raw) in prose_lines(text) {
        let line = without_code_spans(raw);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            if let Some(i) = trimmed.find("]:") {
                let target = trimmed[i + 2..].split_whitespace().next().unwrap_or("");
                out.push(Link {
                    line: n,
                    target: target.trim_matches(['<', '>']).to_string(),
                });
                continue;
            }
        }
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            // The target runs to the `)` that closes the `(`, parentheses nested in it allowed.
            let mut depth = 0usize;
            let mut end = after.len();
            for (j, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = j;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push(Link {
                line: n,
                target: target.trim_matches(['<', '>']).to_string(),
            });
            rest = &after[end.min(after.len())..];
        }
    }
    out
}

/// `path` with `.` and `..` resolved lexically (the files need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:")
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = root();
    let docs = root.join("docs");
    let files = markdown_files();
    assert!(
        files.len() > 20,
        "found only {} Markdown files: {files:?}",
        files.len()
    );
    let mut texts = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        texts.insert(f.clone(), text);
    }
    let mut checked = 0;
    let mut anchors_checked = 0;
    let mut broken = Vec::new();
    for (file, text) in &texts {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for link in links(text) {
            let where_ = format!("{rel}:{}: ({})", link.line, link.target);
            if link.target.is_empty() {
                broken.push(format!("{where_}: an empty link"));
                continue;
            }
            if is_external(&link.target) {
                continue;
            }
            checked += 1;
            let (path, anchor) = match link.target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else if path.starts_with('/') {
                broken.push(format!(
                    "{where_}: an absolute path; link relative to the page"
                ));
                continue;
            } else {
                normalize(&file.parent().unwrap_or(&root).join(path))
            };
            if !dest.starts_with(&root) {
                broken.push(format!("{where_}: points outside the repository"));
                continue;
            }
            if file.starts_with(&docs) && !dest.starts_with(&docs) {
                broken.push(format!(
                    "{where_}: a book page links outside docs/, which the rendered book does \
                     not hold; name the file as code (`src/...`) instead"
                ));
                continue;
            }
            if !dest.exists() {
                broken.push(format!("{where_}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                anchors_checked += 1;
                let Some(target_text) = texts.get(&dest) else {
                    broken.push(format!(
                        "{where_}: an anchor into a file that is not a page"
                    ));
                    continue;
                };
                if !anchors(target_text).contains(anchor) {
                    broken.push(format!("{where_}: no heading with the id `{anchor}`"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links checked");
    assert!(
        anchors_checked > 10,
        "only {anchors_checked} anchors checked"
    );
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_summary_lists_every_page_of_the_book() {
    let root = root();
    let docs = root.join("docs");
    let summary_path = docs.join("SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_path).expect("docs/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&summary)
        .into_iter()
        .filter(|l| !is_external(&l.target))
        .map(|l| normalize(&docs.join(l.target.split('#').next().unwrap_or(""))))
        .collect();
    let mut missing = Vec::new();
    for file in markdown_files() {
        if !file.starts_with(&docs) || file == summary_path {
            continue;
        }
        if !listed.contains(&file) {
            missing.push(
                file.strip_prefix(&root)
                    .unwrap_or(&file)
                    .display()
                    .to_string(),
            );
        }
    }
    for page in &listed {
        assert!(
            page.is_file(),
            "SUMMARY.md lists {}, which does not exist",
            page.display()
        );
    }
    assert!(
        missing.is_empty(),
        "pages not in docs/SUMMARY.md (mdBook would not render them):\n{}",
        missing.join("\n")
    );
    for part in [
        "protocols/README.md",
        "dev/architecture.md",
        "reference/summary-json.md",
    ] {
        assert!(listed.contains(&docs.join(part)), "SUMMARY.md lists {part}");
    }
}

#[test]
fn the_readme_stays_short_and_keeps_its_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md is {lines} lines; the book holds the detail"
    );
    // `.ci/run` and newcomers rely on these exact commands.
    for command in [
        "cargo run --release -- run scenarios/quickstart.yaml",
        "bash scripts/test",
        "cargo install --locked --path .",
        "cargo install --locked --git",
    ] {
        assert!(readme.contains(command), "README.md gives `{command}`");
    }
}

#[test]
fn the_scanner_reads_links_and_headings_as_github_and_mdbook_do() {
    let text = "# Comparing runs (regression gates)\n\
                ## `summary.json` (contract v1)\n\
                ## Notes\n## Notes\n\
                See [a](x.md#y) and `[not](a.md)` and ![img](p.png \"t\").\n\
                ```\n[in code](z.md)\n```\n\
                [ref]: ../other.md#z\n";
    let found: Vec<String> = links(text).into_iter().map(|l| l.target).collect();
    assert_eq!(found, ["x.md#y", "p.png", "../other.md#z"]);
    let ids = anchors(text);
    for id in [
        "comparing-runs-regression-gates",
        "summaryjson-contract-v1",
        "notes",
        "notes-1",
    ] {
        assert!(ids.contains(id), "{id} in {ids:?}");
    }
}

/// The first ```` ```text ```` block of `text`: of a Markdown page, or of a file's `//!` doc
/// comment when `doc_comment` is set.
fn text_block(text: &str, doc_comment: bool) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            if doc_comment {
                l.strip_prefix("//!")
                    .map(|l| l.strip_prefix(' ').unwrap_or(l))
            } else {
                Some(l)
            }
        })
        .collect();
    let start = lines.iter().position(|l| l.trim() == "```text")?;
    let len = lines[start + 1..].iter().position(|l| l.trim() == "```")?;
    Some(lines[start + 1..start + 1 + len].join("\n"))
}

/// One picture of the layers: the architecture page draws the one `tests/it/layers.rs` enforces
/// (whose `ALLOWED` table is the truth; `src/lib.rs` draws it too).
#[test]
fn the_architecture_page_draws_the_layers_the_layers_test_enforces() {
    let page = std::fs::read_to_string(root().join("docs/dev/architecture.md"))
        .expect("docs/dev/architecture.md");
    let layers =
        std::fs::read_to_string(root().join("tests/it/layers.rs")).expect("tests/it/layers.rs");
    let drawn = text_block(&page, false).expect("a ```text diagram on the architecture page");
    let enforced = text_block(&layers, true).expect("a ```text diagram in tests/it/layers.rs");
    assert_eq!(
        drawn, enforced,
        "docs/dev/architecture.md and tests/it/layers.rs draw different layers"
    );
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let lib_drawn = text_block(&lib, true).expect("a ```text diagram in src/lib.rs");
    assert_eq!(
        drawn, lib_drawn,
        "docs/dev/architecture.md and src/lib.rs draw different layers"
    );
    // The table's "may use" column is the ALLOWED table, module by module, in its order.
    let allowed = allowed_table(&layers);
    assert!(allowed.len() >= 8, "parsed ALLOWED: {allowed:?}");
    for (module, uses) in &allowed {
        let row = page
            .lines()
            .find(|l| l.starts_with(&format!("| `{module}` |")))
            .unwrap_or_else(|| panic!("the architecture page has no row for `{module}`"));
        let may_use = row.trim_end_matches('|').rsplit('|').next().unwrap_or("");
        let listed: Vec<String> = may_use
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        assert_eq!(
            &listed, uses,
            "the architecture page's row for `{module}` lists what ALLOWED allows"
        );
        assert!(
            drawn.contains(module.as_str()),
            "the diagram names `{module}`"
        );
    }
}

/// `tests/it/layers.rs`'s `ALLOWED` table, read from its source: each module and the modules it
/// may use, in the order written.
fn allowed_table(layers: &str) -> Vec<(String, Vec<String>)> {
    let start = layers
        .find("const ALLOWED")
        .expect("const ALLOWED in tests/it/layers.rs");
    let body = &layers[start..];
    let body = &body[..body.find("];").expect("the end of ALLOWED")];
    let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    let mut rest = compact.as_str();
    while let Some(i) = rest.find("(\"") {
        let after = &rest[i + 2..];
        let Some(name_end) = after.find('"') else {
            break;
        };
        let name = after[..name_end].to_string();
        let Some(list_start) = after.find("&[") else {
            break;
        };
        let list = &after[list_start + 2..];
        let list_end = list.find(']').unwrap_or(list.len());
        let uses = list[..list_end]
            .split(',')
            .map(|s| s.trim_matches('"').to_string())
            .filter(|s| !s.is_empty())
            .collect();
        out.push((name, uses));
        rest = &list[list_end..];
    }
    out
}
