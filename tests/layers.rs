//! The core imports in one direction.
//!
//! `docs/design.md` holds the layer table (between `<!-- layers -->` and
//! `<!-- /layers -->`): every top-level module of `src/` sits in exactly one
//! layer, and a module may name only modules of lower layers. This test reads
//! every file under `src/`, collects the paths it names (`use` trees and
//! paths written inline, through `crate::`, `super::`, `self::` and, in the
//! binary, `toolwire::`), and fails on each one that points up or sideways,
//! naming the file, the path and the two layers. Unit tests inside a file
//! count as that file: a module whose tests reach above it cannot be tested
//! alone either.
//!
//! Within a module the files may not form a circle either: a file may name
//! its own parent module's file and its children (Rust's module tree and its
//! re-exports), but among the rest the "names" relation must have no cycle.
//!
//! What it cannot see: a path spelled through an alias of a module imported
//! by a `use` (`use crate::format; format::x::Y` counts as naming `format`,
//! which is what the layer check needs), and paths built by macros.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One reference: the file that names something and the file it lands in.
#[derive(Debug, Clone)]
struct Reference {
    from: PathBuf,
    to: PathBuf,
    path: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer table of docs/design.md: module name → layer number.
fn layer_table() -> BTreeMap<String, usize> {
    let design = fs::read_to_string(root().join("docs/design.md")).unwrap();
    let start = design
        .find("<!-- layers -->")
        .expect("docs/design.md has no <!-- layers --> table");
    let end = design[start..]
        .find("<!-- /layers -->")
        .expect("docs/design.md's layer table is not closed by <!-- /layers -->")
        + start;
    let mut table = BTreeMap::new();
    for row in design[start..end].lines() {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(layer) = cells.get(1).and_then(|c| c.parse::<usize>().ok()) else {
            continue;
        };
        let modules = cells.get(3).copied().unwrap_or_default();
        for name in modules.split('`').skip(1).step_by(2) {
            let name = name.trim_start_matches("src/").trim_end_matches('/');
            let name = name.trim_end_matches(".rs");
            assert!(
                table.insert(name.to_owned(), layer).is_none(),
                "docs/design.md lists `{name}` in two layers"
            );
        }
    }
    assert!(
        !table.is_empty(),
        "docs/design.md's layer table has no rows"
    );
    table
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file relative to `src/`, with `/` separators.
fn rel(path: &Path) -> String {
    path.strip_prefix(root().join("src"))
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

/// Whether the file belongs to the binary (`main.rs` and the command line),
/// whose `crate::` is the binary and whose `toolwire::` is the library.
fn in_binary(rel: &str) -> bool {
    rel == "main.rs" || rel.starts_with("cli/")
}

/// The module path of a file: `format/mod.rs` → `[format]`,
/// `format/ids.rs` → `[format, ids]`, `main.rs` → `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let stem = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The top-level module a file is part of (`cli` for the binary).
fn top_module(rel: &str) -> String {
    if in_binary(rel) {
        return "cli".to_owned();
    }
    module_path(rel).first().cloned().unwrap_or_default()
}

/// The source without comments. String literals are kept: a serde
/// attribute names a function by path inside one.
fn strip_comments(src: &str) -> String {
    let bytes = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if c == b'\\' && i + 1 < bytes.len() {
                out.push_str(&src[i..i + 2]);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_string = false;
            }
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        if src[i..].starts_with("//") {
            let end = src[i..].find('\n').map_or(bytes.len(), |n| i + n);
            i = end;
            continue;
        }
        if src[i..].starts_with("/*") {
            let end = src[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |n| i + 2 + n + 2);
            i = end;
            continue;
        }
        if c == b'"' && !(i > 0 && bytes[i - 1] == b'\'') {
            in_string = true;
        }
        let ch = src[i..].chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Expands a `use` tree (`crate::a::{b, c::{self, D}}`) into its paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        let (head, group) = match tree.find('{') {
            Some(open) => (
                &tree[..open],
                Some(&tree[open + 1..tree.rfind('}').unwrap()]),
            ),
            None => (tree, None),
        };
        let head = head.split(" as ").next().unwrap_or_default();
        let mut path = prefix.to_vec();
        for seg in head.split("::").map(str::trim).filter(|s| !s.is_empty()) {
            match seg {
                "self" if !path.is_empty() => {}
                "*" => {}
                _ => path.push(seg.to_owned()),
            }
        }
        match group {
            Some(inner) => {
                for part in split_top(inner) {
                    walk(&path, part, out);
                }
            }
            None => out.push(path),
        }
    }
    let mut out = Vec::new();
    walk(&[], tree, &mut out);
    out
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every path the file names from `crate`, `super`, `self` or `toolwire`,
/// as segments.
fn named_paths(src: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = String::with_capacity(src.len());
    // `use` declarations, expanded; what remains is scanned for inline paths.
    let mut i = 0;
    while let Some(found) = src[i..].find("use ") {
        let at = i + found;
        let starts_word = at == 0 || !is_ident_byte(src.as_bytes()[at - 1]);
        let tree_start = at + 4;
        let tree = src[tree_start..].trim_start();
        let anchored = ["crate", "super", "self", "toolwire"]
            .iter()
            .any(|a| tree.starts_with(a) && tree[a.len()..].starts_with("::"));
        if starts_word && anchored {
            let end = src[tree_start..]
                .find(';')
                .map_or(src.len(), |n| tree_start + n);
            rest.push_str(&src[i..at]);
            paths.extend(expand_use(&src[tree_start..end]));
            i = end;
        } else {
            rest.push_str(&src[i..tree_start]);
            i = tree_start;
        }
    }
    rest.push_str(&src[i..]);

    let bytes = rest.as_bytes();
    for anchor in ["crate", "super", "self", "toolwire"] {
        let mut from = 0;
        while let Some(found) = rest[from..].find(anchor) {
            let at = from + found;
            from = at + anchor.len();
            if at > 0 && (is_ident_byte(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            let mut path = vec![anchor.to_owned()];
            let mut j = at + anchor.len();
            while rest[j..].starts_with("::") {
                let seg_start = j + 2;
                let mut k = seg_start;
                while k < bytes.len() && is_ident_byte(bytes[k]) {
                    k += 1;
                }
                if k == seg_start {
                    break;
                }
                path.push(rest[seg_start..k].to_owned());
                j = k;
            }
            if path.len() > 1 {
                paths.push(path);
            }
        }
    }
    paths
}

/// The file a path lands in: the deepest module along it that has a file.
fn resolve(files: &BTreeSet<String>, from_rel: &str, path: &[String]) -> Option<String> {
    let here = module_path(from_rel);
    let mut module: Vec<String> = match path[0].as_str() {
        "crate" | "toolwire" => Vec::new(),
        "self" => here.clone(),
        "super" => {
            // `super` from `a/b.rs` (module a::b) is `a`; from `a/mod.rs`
            // (module a) it is the crate root.
            let mut m = here.clone();
            m.pop();
            m
        }
        _ => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        module.pop();
        rest = &rest[1..];
    }
    module.extend(rest.iter().cloned());
    let binary_root = path[0] == "crate" && in_binary(from_rel);
    for len in (1..=module.len()).rev() {
        let stem = module[..len].join("/");
        if binary_root && module[0] != "cli" {
            return None;
        }
        for candidate in [format!("{stem}.rs"), format!("{stem}/mod.rs")] {
            if files.contains(&candidate) {
                return Some(candidate);
            }
        }
    }
    None
}

/// Whether one file is the other's parent module (Rust's module tree: a
/// parent declares and re-exports its children, children use what the
/// parent holds).
fn parent_and_child(a: &str, b: &str) -> bool {
    let (ma, mb) = (module_path(a), module_path(b));
    let is_parent = |p: &Vec<String>, c: &Vec<String>| c.len() == p.len() + 1 && c.starts_with(p);
    is_parent(&ma, &mb) || is_parent(&mb, &ma)
}

fn references() -> (BTreeSet<String>, Vec<Reference>) {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let names: BTreeSet<String> = files.iter().map(|f| rel(f)).collect();
    let mut refs = Vec::new();
    for file in &files {
        let from = rel(file);
        if from == "lib.rs" {
            continue;
        }
        let src = strip_comments(&fs::read_to_string(file).unwrap());
        for path in named_paths(&src) {
            if let Some(to) = resolve(&names, &from, &path)
                && to != from
                && to != "lib.rs"
                && to != "main.rs"
            {
                refs.push(Reference {
                    from: PathBuf::from(&from),
                    to: PathBuf::from(&to),
                    path: path.join("::"),
                });
            }
        }
    }
    (names, refs)
}

#[test]
fn every_module_is_in_one_layer() {
    let table = layer_table();
    let (files, _) = references();
    let modules: BTreeSet<String> = files
        .iter()
        .filter(|f| *f != "lib.rs")
        .map(|f| top_module(f))
        .collect();
    let unplaced: Vec<&String> = modules.iter().filter(|m| !table.contains_key(*m)).collect();
    assert!(
        unplaced.is_empty(),
        "modules missing from docs/design.md's layer table: {unplaced:?}"
    );
    let gone: Vec<&String> = table.keys().filter(|m| !modules.contains(*m)).collect();
    assert!(
        gone.is_empty(),
        "docs/design.md's layer table names modules src/ does not have: {gone:?}"
    );
}

#[test]
fn the_core_imports_in_one_direction() {
    let table = layer_table();
    let (_, refs) = references();
    let mut wrong = BTreeSet::new();
    for r in &refs {
        let (from, to) = (r.from.to_string_lossy(), r.to.to_string_lossy());
        let (a, b) = (top_module(&from), top_module(&to));
        if a == b {
            continue;
        }
        let (Some(&la), Some(&lb)) = (table.get(&a), table.get(&b)) else {
            continue; // every_module_is_in_one_layer names it
        };
        if lb >= la {
            wrong.insert(format!(
                "src/{from} → src/{to} ({}): `{a}` (layer {la}) may not know `{b}` (layer {lb})",
                r.path
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} import(s) against docs/design.md's layer table:\n{}",
        wrong.len(),
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn no_files_name_each_other_in_a_circle() {
    let (files, refs) = references();
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for r in &refs {
        let (from, to) = (r.from.to_string_lossy(), r.to.to_string_lossy());
        if parent_and_child(&from, &to) {
            continue;
        }
        edges
            .entry(from.into_owned())
            .or_default()
            .entry(to.into_owned())
            .or_insert_with(|| r.path.clone());
    }
    let circles = strongly_connected(&files, &edges);
    let described: Vec<String> = circles
        .iter()
        .map(|c| {
            let inside: Vec<String> = c
                .iter()
                .flat_map(|f| {
                    edges
                        .get(f)
                        .into_iter()
                        .flatten()
                        .filter(|(t, _)| c.contains(*t))
                        .map(move |(t, path)| format!("  src/{f} → src/{t} ({path})"))
                })
                .collect();
            format!("a circle of {} files:\n{}", c.len(), inside.join("\n"))
        })
        .collect();
    assert!(described.is_empty(), "{}", described.join("\n"));
}

/// Tarjan's strongly connected components with more than one file.
fn strongly_connected(
    files: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on_stack: BTreeSet<String>,
        next: usize,
        found: Vec<BTreeSet<String>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &str) {
            self.index.insert(v.to_owned(), self.next);
            self.low.insert(v.to_owned(), self.next);
            self.next += 1;
            self.stack.push(v.to_owned());
            self.on_stack.insert(v.to_owned());
            let targets: Vec<String> = self
                .edges
                .get(v)
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default();
            for w in targets {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let low = self.low[v].min(self.low[&w]);
                    self.low.insert(v.to_owned(), low);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[v].min(self.index[&w]);
                    self.low.insert(v.to_owned(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = w == v;
                    component.insert(w);
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for f in files {
        if !walk.index.contains_key(f) {
            walk.visit(f);
        }
    }
    walk.found
}

/// The checker itself: a known tree and a known source.
#[test]
fn the_checker_reads_use_trees_and_inline_paths() {
    let src = strip_comments(
        "use crate::a::{b, c::{self, D as E}};\n// crate::commented::out\nfn f() { super::x::y(); let s = \"crate::in_string\"; }\npub use self::z::*;\n",
    );
    let paths: Vec<String> = named_paths(&src).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::a::b",
            "crate::a::c",
            "crate::a::c::D",
            "self::z",
            "crate::in_string",
            "super::x::y"
        ]
    );
    let files: BTreeSet<String> = ["a/mod.rs", "a/c.rs", "x.rs", "m/n.rs", "m/mod.rs"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let seg = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        resolve(&files, "m/n.rs", &seg("crate::a::c::D")).as_deref(),
        Some("a/c.rs")
    );
    assert_eq!(
        resolve(&files, "m/n.rs", &seg("crate::a::b")).as_deref(),
        Some("a/mod.rs")
    );
    assert_eq!(
        resolve(&files, "m/n.rs", &seg("super::Thing")).as_deref(),
        Some("m/mod.rs")
    );
    assert_eq!(
        resolve(&files, "m/mod.rs", &seg("super::x::y")).as_deref(),
        Some("x.rs")
    );
    assert!(parent_and_child("m/mod.rs", "m/n.rs"));
    assert!(!parent_and_child("a/c.rs", "m/n.rs"));
}
