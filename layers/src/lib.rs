//! Imports run one way: a check each crate runs as a unit test over its
//! own `src/`.
//!
//! A crate's modules form a tree. Two kinds of import are always allowed:
//! a module's own descendants, and its ancestors (a child naming its
//! parent's items, as `super::` does). Every other import joins two
//! *siblings*: the children, under their deepest common ancestor, that
//! hold the importer and the imported. [`check`] fails when:
//!
//! - the sibling imports under any module form a cycle, or
//! - a top-level module imports one in a higher layer than its own, in
//!   the order the crate declares (lowest first).
//!
//! Paths are read from the text: `use` trees (braces expanded) and paths
//! written inline (`crate::a::b`, `super::c`, `self::d`). Names the crate
//! root re-exports (`pub use a::B;` in `lib.rs`) count as the module they
//! come from. Code after `#[cfg(test)]` that opens a `mod tests` is left
//! out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`[]` is the root).
pub type ModPath = Vec<String>;

/// Sibling imports: under each parent, which child imports which.
pub type Graph = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// Checks `src` (a crate's `src/` directory; `bin/` is left out) against
/// `layers`, lowest first, each the top-level modules it holds. Answers
/// every violation, one per line.
pub fn check(src: &Path, layers: &[&[&str]]) -> Result<(), String> {
    let graph = graph(src).map_err(|e| format!("reading {}: {e}", src.display()))?;
    let mut wrong = Vec::new();
    for (parent, edges) in &graph {
        for cycle in cycles(edges) {
            wrong.push(format!(
                "import cycle under {}: {}",
                show(parent),
                cycle.join(" -> ")
            ));
        }
    }
    let layer_of = |m: &str| layers.iter().position(|l| l.contains(&m));
    if let Some(top) = graph.get(&Vec::new()) {
        for (from, tos) in top {
            for to in tos {
                match (layer_of(from), layer_of(to)) {
                    (Some(a), Some(b)) if b > a => wrong.push(format!(
                        "{from} (layer {a}) imports {to}, of the higher layer {b}"
                    )),
                    (None, _) => wrong.push(format!("{from} is in no declared layer")),
                    (_, None) => wrong.push(format!("{to} is in no declared layer")),
                    _ => {}
                }
            }
        }
    }
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(wrong.join("\n")),
    }
}

fn show(m: &[String]) -> String {
    match m.is_empty() {
        true => "the crate root".into(),
        false => m.join("::"),
    }
}

/// Reads every module of `src` and answers its sibling imports.
pub fn graph(src: &Path) -> std::io::Result<Graph> {
    let files = modules(src)?;
    let known: BTreeSet<ModPath> = files.keys().cloned().collect();
    let exports = files
        .get(&Vec::new())
        .map(|text| reexports(text))
        .unwrap_or_default();
    let mut graph = Graph::new();
    for (me, text) in &files {
        for path in paths(&code_of(text)) {
            let Some(target) = resolve(me, &path, &known, &exports) else {
                continue;
            };
            if let Some((parent, a, b)) = siblings(me, &target) {
                graph
                    .entry(parent)
                    .or_default()
                    .entry(a)
                    .or_default()
                    .insert(b);
            }
        }
    }
    Ok(graph)
}

/// Each module's file text, by module path.
fn modules(src: &Path) -> std::io::Result<BTreeMap<ModPath, String>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if path != src.join("bin") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.insert(module_of(src, &path), fs::read_to_string(&path)?);
            }
        }
    }
    Ok(out)
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is the root.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel: PathBuf = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text before a `#[cfg(test)]` that opens a `mod`, comments out.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Names `lib.rs` re-exports, with the module each comes from.
fn reexports(lib: &str) -> BTreeMap<String, ModPath> {
    let mut out = BTreeMap::new();
    for stmt in use_statements(&code_of(lib)) {
        if !stmt.starts_with("pub") {
            continue;
        }
        for path in expand(stmt.trim_start_matches("pub").trim_start()) {
            if let [first, .., last] = path.as_slice()
                && first != "crate"
            {
                out.insert(last.clone(), path[..path.len() - 1].to_vec());
            }
        }
    }
    out
}

/// The `use` statements of `code`, each without `use` and `;`, with
/// its leading `pub` (or `pub(crate)`) kept as `pub`.
fn use_statements(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let before = rest[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')');
        let tail = &rest[at + 3..];
        let end = tail.find(';').unwrap_or(tail.len());
        let body = without_aliases(&tail[..end]);
        rest = &tail[end..];
        // The word in prose (a string): not a path.
        let path_like = |c: char| c.is_alphanumeric() || "_:{},*".contains(c);
        if body.is_empty() || !body.chars().all(path_like) {
            continue;
        }
        out.push(match public {
            true => format!("pub{body}"),
            false => body,
        });
    }
    out
}

/// A use tree with its spaces and its `as` renames taken out.
fn without_aliases(tree: &str) -> String {
    let spaced = tree.replace(',', " , ").replace('}', " } ");
    let mut words = spaced.split_whitespace();
    let mut out = String::new();
    while let Some(w) = words.next() {
        match w {
            "as" => {
                words.next();
            }
            w => out.push_str(w),
        }
    }
    out
}

/// Where `word` starts in `text` as a whole word.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if !before.is_some_and(ident) && !after.is_some_and(ident) && after.is_some() {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// A use tree (`a::{b, c::{d, e}}`, spaces removed) as its paths.
fn expand(tree: &str) -> Vec<ModPath> {
    let Some(open) = tree.find('{') else {
        return vec![
            tree.split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        ];
    };
    let prefix: ModPath = tree[..open]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    for part in split_top(inner) {
        for tail in expand(part) {
            let mut p = prefix.clone();
            p.extend(tail.into_iter().filter(|s| s != "self"));
            out.push(p);
        }
    }
    out
}

/// `inner` split at its commas outside braces.
fn split_top(inner: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Every module path `code` names: its use trees, and inline paths that
/// start with `crate`, `super` or `self`.
fn paths(code: &str) -> BTreeSet<ModPath> {
    let mut out: BTreeSet<ModPath> = use_statements(code)
        .iter()
        .flat_map(|s| expand(s.trim_start_matches("pub")))
        .collect();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.insert(
                path.split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
            );
        }
    }
    out
}

/// The module `path`, written in module `me`, names: the longest known
/// module its prefix resolves to. `None` for paths outside the crate.
fn resolve(
    me: &ModPath,
    path: &ModPath,
    known: &BTreeSet<ModPath>,
    exports: &BTreeMap<String, ModPath>,
) -> Option<ModPath> {
    let mut abs: ModPath = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => me.clone(),
        Some("super") => me.clone(),
        _ => return None,
    };
    let mut rest = path.iter().skip(1).peekable();
    if path.first().is_some_and(|p| p == "super") {
        abs.pop();
        while rest.peek().is_some_and(|p| *p == "super") {
            rest.next();
            abs.pop();
        }
    }
    let mut found = abs.clone();
    for (i, part) in rest.enumerate() {
        abs.push(part.clone());
        if known.contains(&abs) {
            found = abs.clone();
        } else if i == 0
            && found.is_empty()
            && let Some(m) = exports.get(part).filter(|m| known.contains(*m))
        {
            return Some(m.clone());
        } else {
            break;
        }
    }
    Some(found)
}

/// The common parent of `me` and `target` and the two children of it
/// that hold them, unless one holds the other.
fn siblings(me: &ModPath, target: &ModPath) -> Option<(ModPath, String, String)> {
    let common = me.iter().zip(target).take_while(|(a, b)| a == b).count();
    let (a, b) = (me.get(common)?, target.get(common)?);
    Some((me[..common].to_vec(), a.clone(), b.clone()))
}

/// The cycles among `edges` (one per strongly connected component of more
/// than one node, shown as its members in order).
pub fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for m in edges.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    stack.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) || !reached[n].contains(*n) {
            continue;
        }
        let component: Vec<String> = nodes
            .iter()
            .filter(|m| reached[n].contains(**m) && reached[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        done.extend(component.iter().cloned());
        out.push(component);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn m(s: &str) -> ModPath {
        s.split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn use_trees_expand_to_their_paths() {
        assert_eq!(
            expand("crate::a::{b,c::{d,e},self}"),
            vec![
                m("crate::a::b"),
                m("crate::a::c::d"),
                m("crate::a::c::e"),
                m("crate::a")
            ]
        );
        assert_eq!(
            expand(&without_aliases("super::x::{Y as Z, w as v}")),
            vec![m("super::x::Y"), m("super::x::w")]
        );
    }

    #[test]
    fn paths_resolve_to_the_longest_known_module() {
        let known: BTreeSet<ModPath> = [m(""), m("a"), m("a::b"), m("c")].into();
        let exports = BTreeMap::from([("Thing".to_string(), m("c"))]);
        let r = |me: &str, p: &str| resolve(&m(me), &m(p), &known, &exports);
        assert_eq!(r("c", "crate::a::b::f"), Some(m("a::b")));
        assert_eq!(r("a::b", "super::super::c::X"), Some(m("c")));
        assert_eq!(r("a", "crate::Thing"), Some(m("c")));
        assert_eq!(r("a", "std::mem"), None);
    }

    #[test]
    fn sibling_imports_are_kept_and_family_ones_are_not() {
        assert_eq!(
            siblings(&m("a::b"), &m("a::c::d")),
            Some((m("a"), "b".into(), "c".into()))
        );
        assert_eq!(
            siblings(&m("a::b"), &m("a")),
            None,
            "a child uses its parent"
        );
        assert_eq!(
            siblings(&m("a"), &m("a::b")),
            None,
            "a parent uses its child"
        );
    }

    #[test]
    fn cycles_are_found_and_chains_are_not() {
        let e = |pairs: &[(&str, &str)]| {
            let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (a, b) in pairs {
                g.entry(a.to_string()).or_default().insert(b.to_string());
            }
            g
        };
        assert!(cycles(&e(&[("a", "b"), ("b", "c")])).is_empty());
        assert_eq!(
            cycles(&e(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
            vec![vec!["a".to_string(), "b".into(), "c".into()]]
        );
    }

    #[test]
    fn test_modules_and_comments_are_left_out() {
        let code =
            code_of("use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n use crate::c;\n}\n");
        assert_eq!(paths(&code), BTreeSet::from([m("crate::a")]));
    }
}
