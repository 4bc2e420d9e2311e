#!/usr/bin/env bash
# Builds the book (docs/, mdBook) into target/book/ with warnings denied: any line mdBook logs
# at WARN or ERROR fails the build, as does a page SUMMARY.md names that does not exist
# (docs/book.toml: create-missing = false). Installs mdBook from the crate registry first when
# it is missing or another version (`cargo install`, a few minutes once).
# Links and anchors are checked by tests/it/docs_links.rs (part of `bash scripts/test`).
#
#   bash scripts/book.sh           # build
#   bash scripts/book.sh --open    # build, then print where the book is
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if [ "$(mdbook --version 2>/dev/null || true)" != "mdbook v$MDBOOK_VERSION" ]; then
  echo "book: installing mdbook $MDBOOK_VERSION (cargo install --locked)"
  # Its own build folder, removed afterwards: the project's target/ stays the project's.
  build_dir="$(mktemp -d)"
  trap 'rm -rf "$build_dir"' EXIT
  # Only what `mdbook build` needs: no `serve`/`watch` (a web server and a file watcher).
  CARGO_TARGET_DIR="$build_dir" cargo install mdbook --locked --version "$MDBOOK_VERSION" \
    --no-default-features --features search
fi

log="$(mktemp)"
if ! mdbook build docs 2>&1 | tee "$log"; then
  echo "book: mdbook build failed" >&2
  exit 1
fi
# mdBook reports some problems (an unresolved include, a bad link in SUMMARY.md) as warnings
# and still exits 0: here they fail the build.
if grep -Ei '(^|[^a-z])(warn|warning|error)([^a-z]|$)' "$log" >/dev/null; then
  echo "book: mdbook printed warnings or errors (above); fix them" >&2
  exit 1
fi
rm -f "$log"
test -f target/book/index.html

# The rendered links resolve too (tests/it/docs_links.rs checks the Markdown; this checks what
# mdBook made of it): every relative href of every page names a file in the book.
broken=0
while IFS= read -r page; do
  dir="$(dirname "$page")"
  while IFS= read -r href; do
    target="${href%%#*}"
    case "$href" in
      ''|'#'*|http:*|https:*|mailto:*|javascript:*|data:*) continue ;;
    esac
    [ -e "$dir/$target" ] || { echo "book: $page links $href, which is not in the book" >&2; broken=1; }
  done < <(grep -o 'href="[^"]*"' "$page" | sed 's/^href="//; s/"$//' | sort -u)
done < <(find target/book -name '*.html')
[ "$broken" -eq 0 ] || exit 1
echo "book: built target/book/index.html ($(find target/book -name '*.html' | wc -l) pages)"
