//! The workspace's layout rules, checked over every member crate's sources
//! (`docs/ARCHITECTURE.md` states them under "Layout notes"):
//!
//! - no import circle between two files of one crate: when a file names another through a
//!   `crate::`, `super::` or `self::` path, that other file does not name it back (a module's
//!   `#[cfg(test)] mod …` block may use anything and is not counted, nor is the crate root,
//!   whose re-exports point everywhere by design);
//! - no `.rs` file under a crate's `src/` or `tests/` over 800 lines unless its opening `//!`
//!   comment says why, in a paragraph starting with the marker [`SIZE_MARKER`].
//!
//! The path reader is small and independent of rustc: it blanks comments and literals, tracks
//! inline `mod name { … }` blocks (so `super::` resolves from the right module) and resolves
//! each path to the deepest module that has its own file. Its unit tests below show it
//! finding a circle and an unexplained long file in small inline sources.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Longest file the house style allows without a stated reason.
const MAX_LINES: usize = 800;
/// Opens the paragraph of the opening `//!` comment that gives the reason for a longer file.
const SIZE_MARKER: &str = "Size: over 800 lines";

/// A module path inside one crate (`["quant", "avx2"]`; empty for the crate root).
type ModPath = Vec<String>;

/// The workspace members listed in the root `Cargo.toml` (`members = ["a", "b"]`).
fn members(root: &Path) -> Vec<String> {
    let text = fs::read_to_string(root.join("Cargo.toml")).expect("read the root Cargo.toml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the root Cargo.toml lists its members on one line");
    let list: Vec<String> = line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert!(!list.is_empty(), "no members read from `{line}`");
    list
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.expect("read a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The module path of a file under `src/`, or `None` for a binary's root (`src/main.rs`,
/// `src/bin/…`), which is a crate of its own.
fn module_path(src: &Path, file: &Path) -> Option<ModPath> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts == ["main"] || parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    Some(parts)
}

/// `src` with comments, string and character literals replaced by spaces (newlines kept),
/// so neither braces nor paths inside them count.
fn blank_comments_and_literals(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // Raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            if i < b.len() {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{7f}'), not a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..b.len()).find(|&k| b[k] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for &ch in &b[i..=e] {
                        blank(&mut out, ch);
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A token of blanked source: an identifier, `::`, or one punctuation character.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokens(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if is_ident(c) {
            let s = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(b[s..i].iter().collect()));
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// Whether `toks[i..]` opens `#[cfg(test)]`.
fn is_cfg_test(toks: &[Tok], i: usize) -> bool {
    let want = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    toks.len() >= i + want.len() && toks[i..i + want.len()] == want
}

/// The index just past the `}` closing the `{` at `open`.
fn matching_brace(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// The module paths named by `crate::`, `super::` and `self::` paths in the source of the
/// module at `here` (outside `#[cfg(test)] mod … { }` blocks), each as written (not yet
/// cut to a file). A group `a::{b, c::d}` names `a::b` and `a::c`.
fn named_paths(here: &[String], source: &str) -> Vec<ModPath> {
    let toks = tokens(&blank_comments_and_literals(source));
    let mut out = Vec::new();
    // Inline modules open at this point: (name, index just past their closing brace).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        while inline.last().is_some_and(|&(_, end)| i >= end) {
            inline.pop();
        }
        if is_cfg_test(&toks, i)
            && toks.get(i + 7) == Some(&Tok::Ident("mod".into()))
            && matches!(toks.get(i + 8), Some(Tok::Ident(_)))
            && toks.get(i + 9) == Some(&Tok::Punct('{'))
        {
            i = matching_brace(&toks, i + 9);
            continue;
        }
        if let (Tok::Ident(m), Some(Tok::Ident(name)), Some(Tok::Punct('{'))) =
            (&toks[i], toks.get(i + 1), toks.get(i + 2))
            && m == "mod"
        {
            inline.push((name.clone(), matching_brace(&toks, i + 2)));
            i += 3;
            continue;
        }
        let head = match &toks[i] {
            Tok::Ident(h) if matches!(h.as_str(), "crate" | "super" | "self") => h.clone(),
            _ => {
                i += 1;
                continue;
            }
        };
        let preceded_by_sep = i > 0 && toks[i - 1] == Tok::PathSep;
        if preceded_by_sep || toks.get(i + 1) != Some(&Tok::PathSep) {
            i += 1;
            continue;
        }
        let mut module: ModPath = here.to_vec();
        module.extend(inline.iter().map(|(n, _)| n.clone()));
        let mut base: ModPath = match head.as_str() {
            "crate" => Vec::new(),
            "self" => module.clone(),
            _ => {
                module.pop();
                module
            }
        };
        let mut j = i + 1;
        let mut leading = true;
        let mut grouped = false;
        while toks.get(j) == Some(&Tok::PathSep) {
            match toks.get(j + 1) {
                Some(Tok::Ident(s)) if leading && s == "super" => {
                    base.pop();
                    j += 2;
                }
                Some(Tok::Ident(s)) => {
                    leading = false;
                    base.push(s.clone());
                    j += 2;
                }
                Some(Tok::Punct('{')) => {
                    let end = matching_brace(&toks, j + 1);
                    for first in group_heads(&toks[j + 2..end - 1]) {
                        let mut p = base.clone();
                        if first != "self" {
                            p.push(first);
                        }
                        out.push(p);
                    }
                    j = end;
                    grouped = true;
                    break;
                }
                _ => {
                    j += 1;
                    break;
                }
            }
        }
        if !grouped {
            out.push(base);
        }
        i = j.max(i + 1);
    }
    out
}

/// The first identifier of each top-level item of a `{ … }` use group.
fn group_heads(inner: &[Tok]) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut at_start = true;
    for t in inner {
        match t {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth = depth.saturating_sub(1),
            Tok::Punct(',') if depth == 0 => at_start = true,
            Tok::Ident(s) if depth == 0 && at_start => {
                out.push(s.clone());
                at_start = false;
            }
            _ => {}
        }
    }
    out
}

/// Pairs of module files of one crate that name each other. `files` maps each module path
/// that has a file to that file's source.
fn mutual_pairs(files: &BTreeMap<ModPath, String>) -> Vec<(ModPath, ModPath)> {
    let mut edges: BTreeMap<&ModPath, BTreeSet<&ModPath>> = BTreeMap::new();
    for (here, source) in files {
        for named in named_paths(here, source) {
            let target = (0..=named.len())
                .rev()
                .find_map(|k| files.get_key_value(&named[..k]).map(|(key, _)| key));
            if let Some(t) = target
                && t != here
            {
                edges.entry(here).or_default().insert(t);
            }
        }
    }
    let mut out = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            let back = edges.get(b).is_some_and(|s| s.contains(a));
            if back && a < b && !a.is_empty() && !b.is_empty() {
                out.push(((*a).clone(), (*b).clone()));
            }
        }
    }
    out
}

/// Whether a file of `source` keeps the line limit or states its reason.
fn size_ok(source: &str) -> bool {
    if source.lines().count() <= MAX_LINES {
        return true;
    }
    let opening: Vec<&str> = source
        .lines()
        .map_while(|l| l.trim_start().strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let Some(at) = opening.iter().position(|l| l.starts_with(SIZE_MARKER)) else {
        return false;
    };
    let reason: String = opening[at..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let words = reason[SIZE_MARKER.len()..]
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphabetic))
        .count();
    words >= 4
}

fn show(p: &ModPath) -> String {
    if p.is_empty() {
        "(crate root)".into()
    } else {
        p.join("/")
    }
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let root = pocketperf_testkit::workspace_root();
    let mut circles = Vec::new();
    let mut modules = 0;
    for krate in members(&root) {
        let src = root.join(&krate).join("src");
        let mut files = BTreeMap::new();
        for f in rust_files(&src) {
            if let Some(mp) = module_path(&src, &f) {
                let text =
                    fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                files.insert(mp, text);
            }
        }
        modules += files.len();
        for (a, b) in mutual_pairs(&files) {
            circles.push(format!("{krate}: {} <-> {}", show(&a), show(&b)));
        }
    }
    assert!(
        modules > 50,
        "only {modules} module files found under {}",
        root.display()
    );
    assert!(
        circles.is_empty(),
        "files that import each other (move what both need to the module that owns it):\n{}",
        circles.join("\n")
    );
}

#[test]
fn long_files_state_their_reason() {
    let root = pocketperf_testkit::workspace_root();
    let mut long = Vec::new();
    let mut seen = 0;
    for krate in members(&root) {
        for dir in ["src", "tests"] {
            for f in rust_files(&root.join(&krate).join(dir)) {
                seen += 1;
                let text =
                    fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                if !size_ok(&text) {
                    let rel = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
                    long.push(format!("{rel}: {} lines", text.lines().count()));
                }
            }
        }
    }
    assert!(
        seen > 50,
        "only {seen} files found under {}",
        root.display()
    );
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines without a `//! {SIZE_MARKER} …` reason in their opening \
         comment (split them along their seams, or say why not):\n{}",
        long.join("\n")
    );
}

/// A crate of inline sources, keyed by module path (`"a/b"`; `""` for the root).
fn krate(files: &[(&str, &str)]) -> BTreeMap<ModPath, String> {
    files
        .iter()
        .map(|(p, s)| {
            let mp = p
                .split('/')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect();
            (mp, s.to_string())
        })
        .collect()
}

fn mp(s: &str) -> ModPath {
    s.split('/').map(String::from).collect()
}

#[test]
fn parser_finds_a_circle_through_crate_and_super_paths() {
    let files = krate(&[
        ("", "pub mod m;"),
        ("m", "mod a; mod b;"),
        ("m/a", "use crate::m::b::Thing;\npub struct Other;"),
        (
            "m/b",
            "pub struct Thing;\nfn f() -> super::a::Other { todo() }",
        ),
    ]);
    assert_eq!(mutual_pairs(&files), vec![(mp("m/a"), mp("m/b"))]);
}

#[test]
fn parser_reads_use_groups_and_self_paths() {
    let files = krate(&[
        ("", ""),
        ("q", "mod x; mod y;\nuse self::x::{self, Deep};"),
        ("q/x", "use super::{\n    y::{A, B},\n    Z,\n};"),
        ("q/y", "use crate::q::{x::{One, Two}, Other};"),
    ]);
    // `self::x` from q/mod.rs and `super::Z` from q/x.rs: q <-> q/x is a circle too.
    assert_eq!(
        mutual_pairs(&files),
        vec![(mp("q"), mp("q/x")), (mp("q/x"), mp("q/y"))]
    );
    let mut named = named_paths(&mp("q"), &files[&mp("q")]);
    named.sort();
    assert_eq!(named, vec![mp("q/x"), mp("q/x/Deep")]);
}

#[test]
fn parser_ignores_test_blocks_comments_and_strings() {
    let files = krate(&[
        ("", ""),
        (
            "a",
            "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::b::g;\n}",
        ),
        (
            "b",
            "// crate::a::f\n/* super::a::f */\npub fn g() -> &'static str { \"crate::a::f\" }\n\
             const C: char = '{';\nfn h() { super::a::f() }",
        ),
    ]);
    assert!(mutual_pairs(&files).is_empty());
    // Take the test block away and the circle is there.
    let mut with_use = files.clone();
    with_use.insert(mp("a"), "use crate::b::g;\npub fn f() {}".into());
    assert_eq!(mutual_pairs(&with_use), vec![(mp("a"), mp("b"))]);
}

#[test]
fn parser_resolves_super_inside_inline_modules() {
    // `super::` inside `mod inner { }` of file k/a means k/a, not k: no circle with k/b.
    let files = krate(&[
        ("", ""),
        ("k", "mod a; mod b;"),
        (
            "k/a",
            "pub fn f() {}\nmod inner { use super::super::b::g; }",
        ),
        ("k/b", "pub fn g() { crate::k::a::f() }"),
    ]);
    assert_eq!(mutual_pairs(&files), vec![(mp("k/a"), mp("k/b"))]);
    let one_level = krate(&[
        ("", ""),
        ("k", "mod a; mod b;"),
        ("k/a", "pub fn f() {}\nmod inner { use super::f; }"),
        ("k/b", "pub fn g() { crate::k::a::f() }"),
    ]);
    assert!(mutual_pairs(&one_level).is_empty());
}

#[test]
fn size_rule_wants_a_reason_past_the_limit() {
    let body = "fn f() {}\n".repeat(MAX_LINES);
    assert!(size_ok(&body), "exactly {MAX_LINES} lines are allowed");
    let long = format!("//! A module.\n{body}");
    assert!(!size_ok(&long));
    let bare = format!("//! A module.\n//!\n//! {SIZE_MARKER}.\n{body}");
    assert!(!size_ok(&bare), "the marker alone is no reason");
    let later = format!("//! A module.\n{body}//! {SIZE_MARKER}: one table, read in one pass.\n");
    assert!(
        !size_ok(&later),
        "the reason belongs to the opening comment"
    );
    let stated = format!(
        "//! A module.\n//!\n//! {SIZE_MARKER}: the key table and its lookup\n//! are one \
         unit.\n{body}"
    );
    assert!(size_ok(&stated));
}
