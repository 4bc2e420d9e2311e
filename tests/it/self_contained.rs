//! The repository is self-contained: nothing in it (code, scripts, README.md and the docs/
//! book) points at documents that live outside a user's clone. Every protocol fact the code
//! cites is on the project's own page, `docs/protocols/<name>.md`, and each protocol's
//! `INFO.spec` names that page.

use std::path::{Path, PathBuf};
use std::process::Command;

use tickswarm::protocol::ProtocolName;

/// References that only resolve on the machine the project was written on. Built from pieces
/// so that this file does not match itself.
fn forbidden() -> [String; 3] {
    [
        format!("../{}", "shared"),
        format!("{}/{}", "shared", "specs"),
        format!("{}.{}", "NOTES", "md"),
    ]
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The tracked files and the new ones git does not ignore (`git ls-files`), or, outside a git checkout (a packaged crate), every
/// file under the root except build output and VCS metadata.
fn repository_files() -> Vec<PathBuf> {
    let root = root();
    let git = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output();
    if let Ok(out) = git {
        if out.status.success() && !out.stdout.is_empty() {
            return out
                .stdout
                .split(|&b| b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
                .collect();
        }
    }
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, files),
            Ok(t) if t.is_file() => files.push(path),
            _ => {}
        }
    }
}

#[test]
fn no_file_points_outside_the_repository() {
    let patterns = forbidden();
    let root = root();
    let files = repository_files();
    assert!(
        files.iter().any(|f| f.ends_with("Cargo.toml")),
        "the walk found no Cargo.toml: {} files under {}",
        files.len(),
        root.display()
    );
    let mut hits = Vec::new();
    let mut text_files = 0;
    for file in &files {
        // Binary files (fuzz corpora, images) cannot cite a document.
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        text_files += 1;
        for (n, line) in text.lines().enumerate() {
            for p in &patterns {
                if line.contains(p.as_str()) {
                    let rel = file.strip_prefix(&root).unwrap_or(file);
                    hits.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(text_files > 100, "only {text_files} text files read");
    // The book and the README are read too: they are where a reference outside would hurt most.
    for doc in ["README.md", "docs/SUMMARY.md", "docs/dev/architecture.md"] {
        assert!(
            files.iter().any(|f| f.ends_with(doc)),
            "{doc} is not among the files read"
        );
    }
    assert!(
        hits.is_empty(),
        "{} reference(s) to documents outside the repository; cite docs/protocols/<name>.md \
         instead:\n{}",
        hits.len(),
        hits.join("\n")
    );
}

#[test]
fn every_protocol_names_its_own_page() {
    for &proto in ProtocolName::ALL {
        let info = proto.info();
        assert_eq!(
            info.spec,
            format!("docs/protocols/{}.md", info.name),
            "{}: INFO.spec",
            info.name
        );
        let page = root().join(info.spec);
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", info.name, page.display()));
        assert!(
            text.starts_with(&format!("# {} ", info.name)),
            "{}: the page's title names the protocol",
            info.name
        );
    }
}

#[test]
fn the_protocol_index_links_every_page() {
    let index = std::fs::read_to_string(root().join("docs/protocols/README.md"))
        .expect("docs/protocols/README.md");
    for &proto in ProtocolName::ALL {
        let name = proto.info().name;
        assert!(
            index.contains(&format!("({name}.md)")),
            "docs/protocols/README.md does not link {name}.md"
        );
    }
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    assert!(
        readme.contains("(docs/protocols/README.md)"),
        "README.md links the protocol pages"
    );
}
