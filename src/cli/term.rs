//! Console output that can neither panic nor be hijacked.
//!
//! Two things go wrong with `println!`/`eprintln!` at a command line:
//! - **A closed pipe panics them.** `tickswarm run … 2>&1 | head -1` closes stderr after one
//!   line; Rust ignores SIGPIPE, so the next write fails with `EPIPE` and `eprintln!` panics
//!   (exit 101), before the report is written. A reader that went away is not an error of the
//!   run: [`say!`] and [`out!`] drop what cannot be written and carry on.
//! - **Text from files reaches a terminal.** A scenario's name, a target, a path or a YAML
//!   snippet quoted in an error can hold escape sequences (ESC, OSC 8 links, a title change,
//!   a cursor move that overwrites the verdict). Everything printed through these macros has
//!   its control characters (C0 but newline and tab, DEL, C1) shown as `\u{1b}`-style escapes
//!   ([`clean`]). The progress line's own control codes go through [`raw_stderr`], with the
//!   text inside them cleaned by the caller.

use std::borrow::Cow;
use std::io::Write;

/// Whether `c` would act on a terminal instead of being shown.
fn is_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c)
}

/// `s` with every control character but newline and tab written as a visible escape
/// (`\u{1b}`), so a terminal shows it instead of obeying it.
pub(crate) fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Write already-clean text (and the console's own control codes) to stderr, ignoring a
/// closed or failing stderr.
pub(crate) fn raw_stderr(s: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(s.as_bytes());
    let _ = e.flush();
}

/// Write `s` cleaned to stderr, ignoring a closed or failing stderr.
pub(crate) fn stderr(s: &str) {
    raw_stderr(&clean(s));
}

/// Write `s` cleaned to stdout, ignoring a closed stdout (`tickswarm validate … | head -1`).
pub(crate) fn stdout(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(clean(s).as_bytes());
    let _ = o.flush();
}

/// Colours the console uses: a verdict's PASS and FAIL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Colour {
    Green,
    Red,
    Yellow,
}

/// Whether stderr takes colour: a terminal, `NO_COLOR` unset or empty (no-color.org), and a
/// `TERM` other than `dumb`.
pub(crate) fn stderr_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// `text` cleaned and, when `on`, between the SGR codes of `colour` and a reset.
pub(crate) fn paint(text: &str, colour: Colour, on: bool) -> String {
    let text = clean(text);
    if !on {
        return text.into_owned();
    }
    let code = match colour {
        Colour::Green => "32",
        Colour::Red => "31",
        Colour::Yellow => "33",
    };
    format!("\x1b[1;{code}m{text}\x1b[0m")
}

/// `eprintln!` that never panics and never passes a control character to the terminal.
macro_rules! say {
    () => { $crate::cli::term::stderr("\n") };
    ($($arg:tt)*) => {
        $crate::cli::term::stderr(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` (no newline) with the same guarantees as [`say!`].
macro_rules! say_inline {
    ($($arg:tt)*) => { $crate::cli::term::stderr(&format!($($arg)*)) };
}

/// `println!` that never panics and never passes a control character to the terminal.
macro_rules! out {
    () => { $crate::cli::term::stdout("\n") };
    ($($arg:tt)*) => {
        $crate::cli::term::stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` (no newline) with the same guarantees as [`out!`].
macro_rules! out_inline {
    ($($arg:tt)*) => { $crate::cli::term::stdout(&format!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn escape_sequences_are_shown_not_obeyed() {
        // OSC 0 (set the window title) ended by BEL, then a CSI that clears the line.
        let name = "quick\u{1b}]0;pwned\u{7}start\u{1b}[2K";
        assert_eq!(
            clean(name),
            "quick\\u{1b}]0;pwned\\u{7}start\\u{1b}[2K",
            "ESC and BEL are written as escapes"
        );
        // A C1 control (CSI as one code point) and DEL.
        assert_eq!(clean("a\u{9b}31mb\u{7f}"), "a\\u{9b}31mb\\u{7f}");
    }

    #[test]
    fn paint_colours_only_when_asked_and_never_passes_control_characters() {
        use super::{paint, Colour};
        assert_eq!(paint("PASS", Colour::Green, true), "\x1b[1;32mPASS\x1b[0m");
        assert_eq!(paint("FAIL", Colour::Red, false), "FAIL");
        assert_eq!(
            paint("x\u{1b}[2K", Colour::Red, true),
            "\x1b[1;31mx\\u{1b}[2K\x1b[0m"
        );
    }

    #[test]
    fn plain_text_newlines_and_tabs_pass_unchanged() {
        let s = "verdict  PASS\n\trtt p99 · 1.25 ms µs";
        assert!(matches!(clean(s), std::borrow::Cow::Borrowed(_)));
        assert_eq!(clean(s), s);
    }
}
