//! The layer check: dependencies inside `src/` run one way.
//!
//! Each top-level module has a rank; a file may refer (with `crate::` or
//! `super::` paths, in `use` lines or inline) only to its own top-level
//! module or to ones of lower rank:
//!
//! `cli` → `server` → `api` → `lease` → `nats` → `observe` → `config` →
//! `error` → `proto`
//!
//! so the API glue sits on the lease protocol, which sits on the NATS
//! adapter, and `observe`, `config` and `error` are leaves. Inside a
//! top-level module, no two files may refer to each other in a circle.
//! Test-only code (everything from a file's first `#[cfg(test)]`, which
//! therefore stands at its end) is not checked: tests may reach anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first.
const RANKS: &[&str] = &[
    "proto", "error", "config", "observe", "nats", "lease", "api", "server", "cli",
];

/// A source file and the module path it defines (`lease::watch`; the crate
/// root is empty).
struct File {
    /// The module path segments.
    module: Vec<String>,
    /// The file's text without comments and without its test module.
    code: String,
}

fn rank(top: &str) -> Option<usize> {
    RANKS.iter().position(|r| *r == top)
}

fn files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The module path of a file under `src/`.
fn module_of(src: &Path, path: &Path) -> Vec<String> {
    let rel = path.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file: comments removed, the trailing test-only code cut.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path the code refers to, resolved to absolute segments
/// (e.g. `super::record::Holding` in `lease::list` → `lease::record::Holding`);
/// a group (`crate::nats::{Message, Op}`) gives one path per item.
fn references(file: &File) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code = &file.code;
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            // Only whole path starts: not `xsuper::` or `a::super::`.
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let after = &code[at + path.len()..];
            // `prefix::{a, b::c}`: one path per item, one level deep.
            let paths: Vec<String> = match after.strip_prefix('{') {
                Some(group) => {
                    let end = group.find('}').unwrap_or(group.len());
                    group[..end]
                        .split(',')
                        .map(|item| item.trim().split([' ', '{']).next().unwrap_or(""))
                        .filter(|item| !item.is_empty() && *item != "self")
                        .map(|item| format!("{path}{item}"))
                        .chain(std::iter::once(path.clone()))
                        .collect()
                }
                None => vec![path],
            };
            for path in paths {
                let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                let mut base: Vec<String> = if segments.first() == Some(&"crate") {
                    segments.remove(0);
                    Vec::new()
                } else {
                    file.module.clone()
                };
                while segments.first() == Some(&"super") {
                    segments.remove(0);
                    base.pop();
                }
                base.extend(segments.iter().map(|s| s.to_string()));
                out.push(base);
            }
        }
    }
    out
}

/// The longest prefix of `path` that is a module with its own file.
fn owner(path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default()
}

#[test]
fn dependencies_run_one_way_without_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files(&src, &mut paths);
    let all: Vec<File> = paths
        .iter()
        .map(|p| File {
            module: module_of(&src, p),
            code: code_of(&std::fs::read_to_string(p).expect("read file")),
        })
        .collect();
    let modules: BTreeSet<Vec<String>> = all.iter().map(|f| f.module.clone()).collect();
    let mut problems = Vec::new();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &all {
        let Some(top) = file.module.first() else {
            continue; // the crate root and the binary wire everything
        };
        let Some(mine) = rank(top) else {
            problems.push(format!(
                "src/{top}: a top-level module the layer check does not rank; add it to RANKS"
            ));
            continue;
        };
        for path in references(file) {
            let Some(target) = path.first() else { continue };
            let theirs = rank(target);
            if target != top && theirs.is_none_or(|t| t >= mine) {
                problems.push(format!(
                    "{} refers to {} — `{target}` is not below `{top}`",
                    file.module.join("::"),
                    path.join("::")
                ));
            }
            let to = owner(&path, &modules);
            if to != file.module && to.first() == Some(top) {
                edges.entry(file.module.clone()).or_default().insert(to);
            }
        }
    }
    // Circles between files of one top-level module.
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let names: Vec<String> = trail.iter().map(|m| m.join("::")).collect();
                    problems.push(format!(
                        "circle: {} → {}",
                        names.join(" → "),
                        start.join("::")
                    ));
                } else if seen.insert(next.clone()) {
                    let mut t = trail.clone();
                    t.push(next.clone());
                    stack.push((next.clone(), t));
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "layer violations:\n{}",
        problems.join("\n")
    );
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 5,
        "the check found the modules' references"
    );
}

/// The check itself catches an upward reference and a circle.
#[test]
fn the_check_catches_violations() {
    let file = File {
        module: vec!["nats".into(), "kv".into()],
        code: code_of(
            "use crate::lease::Holding;\nuse super::{connection, kv::Op};\n// crate::api in a comment\n",
        ),
    };
    let refs: Vec<String> = references(&file).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        refs,
        ["lease::Holding", "nats::connection", "nats::kv::Op", "nats"]
    );
    assert!(rank("lease") > rank("nats"), "lease sits above nats");
}
